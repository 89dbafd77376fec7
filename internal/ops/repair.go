package ops

import (
	"context"
	"fmt"
	"strings"

	"github.com/inorder/inorder/source"
)

// repair reads the missing versions of a projection's waiting aggregates
// (or one of them) from the source and feeds them through the gate — in a
// preview, in transactions that are rolled back (the source's dry run).
func (e *Engine) repair(ctx context.Context, r Request) (Result, error) {
	repairs, err := e.Repairs.Repair(ctx, &source.RepairOptions{Projection: r.Projection, Generation: r.Generation,
		Aggregate: r.Aggregate, DryRun: !r.Confirm, Limit: BulkMax})
	if err != nil {
		return Result{}, err
	}
	items := make([]any, 0, min(len(repairs), PreviewRows))
	var found, missing int
	for i, rp := range repairs {
		found += rp.Found
		if len(rp.Missing) > 0 {
			missing++
		}
		if i < PreviewRows {
			items = append(items, rp)
		}
	}
	verb := "repaired"
	if !r.Confirm {
		verb = "would repair"
	}
	msg := fmt.Sprintf("%s %d waiting aggregate(s): %d version(s) found at the source", verb, len(repairs), found)
	if missing > 0 {
		msg += fmt.Sprintf("; %d aggregate(s) have versions the source does not hold (declare those gaps)", missing)
	}
	res := Result{Action: r.Action, DryRun: !r.Confirm, Matched: int64(len(repairs)), Items: items, Message: msg}
	if r.Confirm {
		res.Done = int64(len(repairs) - missing)
		for _, rp := range repairs {
			if len(rp.Missing) > 0 && len(res.Failures) < 20 {
				res.Failures = append(res.Failures, fmt.Sprintf("%s: missing at the source: %s %s", rp.Aggregate, strings.Join(rp.Missing, ", "), rp.Reason))
			}
		}
		res.Failed = int64(missing)
	}
	return res, nil
}
