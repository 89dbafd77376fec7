package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/projection"
)

// item is one item a bulk action matched: the single request that acts on
// it, and the row the preview lists.
type item struct {
	req Request
	row any
}

// match lists the items a bulk request's filter matches at asOf (those that
// entered later are left out), at most limit, and how many there are up to
// CountCap.
func (e *Engine) match(ctx context.Context, r Request, asOf time.Time, limit int) ([]item, int64, bool, error) {
	lo := projection.ListOptions{Projection: r.Projection, Aggregate: r.Aggregate, Generation: r.Generation, OmitPayloads: true,
		Limit: CountCap + 1, Open: true}
	var out []item
	var n int64
	keep := func(at time.Time, it item) {
		if at.After(asOf) {
			return
		}
		n++
		if len(out) < limit {
			out = append(out, it)
		}
	}
	switch r.Action {
	case BulkRetry, BulkSkip:
		rows, err := e.Proc.Quarantined(ctx, lo)
		if err != nil {
			return nil, 0, false, err
		}
		single := Retry
		if r.Action == BulkSkip {
			single = Skip
		}
		for _, q := range rows {
			keep(q.QuarantinedAt, item{Request{Action: single, Projection: q.Projection, Generation: r.Generation, Aggregate: q.Aggregate, Reason: r.Reason, By: r.By, Confirm: true}, q})
		}
		return out, n, len(rows) > CountCap, nil
	case BulkDismiss:
		lo.Projection = ""
		rows, err := e.Proc.Rejected(ctx, lo)
		if err != nil {
			return nil, 0, false, err
		}
		for _, x := range rows {
			keep(x.FirstSeen, item{Request{Action: Dismiss, ID: x.ID, Reason: r.Reason, By: r.By, Confirm: true}, x})
		}
		return out, n, len(rows) > CountCap, nil
	case BulkAck:
		rows, err := e.Proc.Conflicts(ctx, lo)
		if err != nil {
			return nil, 0, false, err
		}
		for _, x := range rows {
			keep(x.FirstSeen, item{Request{Action: Ack, ID: x.ID, Reason: r.Reason, By: r.By, Confirm: true}, x})
		}
		return out, n, len(rows) > CountCap, nil
	case BulkEffectsRetry:
		if e.Effects == nil {
			return nil, 0, false, fmt.Errorf("%w: this binary has no effect handlers", ErrUnsupported)
		}
		states := []effects.State{effects.Failed, effects.Cancelled}
		if r.State != "" {
			if r.State != string(effects.Failed) && r.State != string(effects.Cancelled) {
				return nil, 0, false, fmt.Errorf("%w: bulk retry acts on failed or cancelled intents", ErrBadRequest)
			}
			states = []effects.State{effects.State(r.State)}
		}
		capped := false
		for _, s := range states {
			rows, err := e.Effects.List(ctx, projection.ListOptions{State: string(s), Kind: r.Kind, Projection: r.Projection, Limit: CountCap + 1})
			if err != nil {
				return nil, 0, false, err
			}
			capped = capped || len(rows) > CountCap
			for _, x := range rows {
				if r.Aggregate == "" || x.Aggregate == r.Aggregate {
					keep(x.UpdatedAt, item{Request{Action: EffectsRetry, Key: x.Key, By: r.By, Confirm: true}, x})
				}
			}
		}
		return out, n, capped, nil
	}
	return nil, 0, false, fmt.Errorf("%w: %s", ErrBadRequest, r.Action)
}

// bulk previews a bulk action, or carries it out on what its preview
// matched.
func (e *Engine) bulk(ctx context.Context, r Request) (Result, error) {
	if !r.Confirm {
		asOf := time.Now()
		items, n, capped, err := e.match(ctx, r, asOf, PreviewRows)
		if err != nil {
			return Result{}, err
		}
		rows := make([]any, len(items))
		for i, it := range items {
			rows[i] = it.row
		}
		msg := fmt.Sprintf("would %s %d item(s) matching the filter", verb(r.Action), n)
		if capped {
			msg = fmt.Sprintf("would %s more than %d items matching the filter (a run acts on %d at most)", verb(r.Action), CountCap, BulkMax)
		}
		return Result{Action: r.Action, DryRun: true, Matched: n, Capped: capped, Items: rows, AsOf: asOf, Message: msg}, nil
	}
	if r.AsOf.IsZero() {
		return Result{}, need(r.Action, "as_of and expect from its preview")
	}
	items, n, _, err := e.match(ctx, r, r.AsOf, BulkMax)
	if err != nil {
		return Result{}, err
	}
	if n > r.Expect {
		return Result{}, fmt.Errorf("%w (now %d, previewed %d)", ErrChanged, n, r.Expect)
	}
	res := Result{Action: r.Action, AsOf: r.AsOf, Matched: n, Items: []any{}}
	for _, it := range items {
		if ctx.Err() != nil {
			break
		}
		rep, err := e.perform(ctx, it.req, false)
		if err != nil {
			res.Failed++
			if len(res.Failures) < 20 {
				res.Failures = append(res.Failures, describe(it.req)+": "+err.Error())
			}
			continue
		}
		res.Done++
		if len(res.Reports) < PreviewRows {
			res.Reports = append(res.Reports, rep)
		}
	}
	if _, left, _, err := e.match(context.WithoutCancel(ctx), r, r.AsOf, 0); err == nil {
		res.Remaining = left
	}
	res.Message = fmt.Sprintf("%s: %d done, %d failed, %d still match", verb(r.Action), res.Done, res.Failed, res.Remaining)
	return res, nil
}

func verb(action string) string {
	switch action {
	case BulkRetry:
		return "retry"
	case BulkSkip:
		return "skip"
	case BulkDismiss:
		return "dismiss"
	case BulkAck:
		return "acknowledge"
	case BulkEffectsRetry:
		return "retry"
	}
	return action
}

func describe(r Request) string {
	switch {
	case r.Key != "":
		return "intent " + r.Key
	case r.ID > 0:
		return fmt.Sprintf("%s %d", r.Action, r.ID)
	default:
		return fmt.Sprintf("%s %s", r.Projection, r.Aggregate)
	}
}
