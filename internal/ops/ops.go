package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// Limits of bulk actions.
const (
	// BulkMax is the most items one confirmed bulk run acts on; the rest
	// are left for another run (the answer says how many remain).
	BulkMax = 1000
	// CountCap bounds the preview's count: beyond it the preview says
	// "more than CountCap" (Capped) instead of scanning on.
	CountCap = 10_000
	// PreviewRows is how many matching rows a preview lists.
	PreviewRows = 20
)

// The actions. Singles act on one item, bulk ones on a filter.
const (
	Retry           = "retry"
	Skip            = "skip"
	DeclareGap      = "declare-gap"
	Repair          = "repair"
	Replay          = "replay"
	Dismiss         = "dismiss"
	Ack             = "ack"
	RebuildStart    = "rebuild-start"
	RebuildSwitch   = "rebuild-switch"
	RebuildRollback = "rebuild-rollback"
	RebuildDrop     = "rebuild-drop"
	EffectsRetry    = "effects-retry"

	BulkRetry        = "bulk-retry"
	BulkSkip         = "bulk-skip"
	BulkDismiss      = "bulk-dismiss"
	BulkAck          = "bulk-ack"
	BulkEffectsRetry = "bulk-effects-retry"
)

// Actions lists every action, singles first.
var Actions = []string{Retry, Skip, DeclareGap, Repair, Replay, Dismiss, Ack, RebuildStart, RebuildSwitch, RebuildRollback, RebuildDrop, EffectsRetry,
	BulkRetry, BulkSkip, BulkDismiss, BulkAck, BulkEffectsRetry}

// needReason lists the actions that cannot be undone: they need a reason.
var needReason = []string{Skip, DeclareGap, Dismiss, Ack, RebuildDrop, BulkSkip, BulkDismiss, BulkAck}

// Errors of Do. Each is a client's mistake (the HTTP API answers 400, 404
// or 409 with it).
var (
	// ErrBadRequest reports a request that misses or mangles a field.
	ErrBadRequest = errors.New("bad request")
	// ErrUnsupported reports an action this server cannot do (no effects
	// client, no source to rebuild from).
	ErrUnsupported = errors.New("not supported by this server")
	// ErrChanged reports a confirmation whose filter now matches more
	// than its preview did: preview again.
	ErrChanged = errors.New("more items match than the preview counted; preview again")
)

// Request is one action: a preview, unless Confirm.
type Request struct {
	Action string `json:"action"`
	// The item: Projection (and Generation, 0 for the live one) with
	// Aggregate for retry, skip and declare-gap (To: the last missing
	// version); ID for replay, dismiss and ack; Generation for
	// rebuild-drop; Key for effects-retry.
	Projection string `json:"projection,omitempty"`
	Generation int    `json:"generation,omitempty"`
	Aggregate  string `json:"aggregate,omitempty"`
	ID         int64  `json:"id,omitempty"`
	To         int64  `json:"to,omitempty"`
	Key        string `json:"key,omitempty"`
	// Filter is what a bulk action acts on (Projection and Aggregate
	// above count for it too).
	Kind  string `json:"kind,omitempty"`
	State string `json:"state,omitempty"`
	// ExpectChanges, for rebuild-start, is a repair of a read model known
	// to be damaged: the new generation need not have the live one's
	// content. A rebuild started this way waits, caught up, for
	// rebuild-switch.
	ExpectChanges bool `json:"expect_changes,omitempty"`
	// Reason says why, for the operator log; required by the actions that
	// cannot be undone.
	Reason string `json:"reason,omitempty"`
	// Confirm carries the action out; without it the answer is a preview
	// and nothing changes.
	Confirm bool `json:"confirm,omitempty"`
	// AsOf and Expect, on a bulk confirmation, are the preview's: only
	// items that matched at AsOf are acted on, and if more than Expect
	// match, nothing is done (ErrChanged).
	AsOf   time.Time `json:"as_of,omitzero"`
	Expect int64     `json:"expect,omitempty"`
	// By is who acts, for the operator log; the server sets it.
	By string `json:"-"`
}

// Result says what an action did, or in a preview would do.
type Result struct {
	Action  string `json:"action"`
	DryRun  bool   `json:"dry_run"`
	Message string `json:"message"`
	// Matched counts the items the action touches (at most CountCap,
	// Capped beyond); Items lists the first PreviewRows of them.
	Matched int64 `json:"matched"`
	Capped  bool  `json:"capped,omitempty"`
	Items   any   `json:"items"`
	// AsOf bounds a bulk action: pass it back, with Expect=Matched, to
	// confirm.
	AsOf time.Time `json:"as_of,omitzero"`
	// Done and Failed count what a confirmed run did; Failures say why, a
	// line each (the first 20); Remaining counts the items that still match
	// (a bulk run stops after BulkMax).
	Done      int64    `json:"done"`
	Failed    int64    `json:"failed"`
	Failures  []string `json:"failures,omitempty"`
	Remaining int64    `json:"remaining"`
	// Reports are the processor's own reports of the actions on single
	// items (of a dry run, in a preview), the first PreviewRows of a bulk
	// run.
	Reports []projection.ActionReport `json:"reports,omitempty"`
}

// Rebuilder starts a side-by-side rebuild in the server's process.
type Rebuilder interface {
	StartRebuild(ctx context.Context, projection, by string, opts *projection.BuildOptions, done func(error)) error
}

// Repairer reads the missing versions of waiting aggregates from the
// source the workers read, and feeds them through the gate (source.Repairer
// with the server's source).
type Repairer interface {
	Repair(ctx context.Context, opts *source.RepairOptions) ([]source.Repair, error)
}

// Engine carries actions out on a processor (and an effects client).
type Engine struct {
	Proc    *projection.Processor
	Effects *effects.Client
	// Repairs, if set, repairs parked aggregates from the source.
	Repairs Repairer
	// Rebuilds, if set, starts rebuilds.
	Rebuilds Rebuilder
}

// need returns an ErrBadRequest error naming the missing fields.
func need(action string, missing ...string) error {
	return fmt.Errorf("%w: %s needs %s", ErrBadRequest, action, strings.Join(missing, " and "))
}

// one is a single action's preview: the item it touches, and what it would
// do.
func one(action string, item any, msg string) Result {
	return Result{Action: action, DryRun: true, Matched: 1, Items: []any{item}, Message: msg}
}
