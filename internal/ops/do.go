package ops

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/inorder/inorder/projection"
)

// This file holds the entry point: a request checked, then sent to the
// single actions (single.go), the bulk ones (bulk.go) or the repair
// (repair.go).

// Do validates r and previews it, or carries it out when r.Confirm.
func (e *Engine) Do(ctx context.Context, r Request) (Result, error) {
	if !slices.Contains(Actions, r.Action) {
		return Result{}, fmt.Errorf("%w: unknown action %q", ErrBadRequest, r.Action)
	}
	if slices.Contains(needReason, r.Action) && strings.TrimSpace(r.Reason) == "" {
		return Result{}, fmt.Errorf("%w: %s needs a reason (it cannot be undone)", ErrBadRequest, r.Action)
	}
	if r.Projection != "" && !slices.Contains(e.Proc.Projections(), r.Projection) {
		return Result{}, fmt.Errorf("%w: %q", projection.ErrUnknownProjection, r.Projection)
	}
	if r.Generation < 0 || r.ID < 0 || r.To < 0 || r.Expect < 0 {
		return Result{}, fmt.Errorf("%w: negative number", ErrBadRequest)
	}
	if strings.HasPrefix(r.Action, "bulk-") {
		return e.bulk(ctx, r)
	}
	return e.single(ctx, r)
}
