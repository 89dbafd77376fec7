package ops

import (
	"context"
	"fmt"

	"github.com/inorder/inorder/projection"
)

// single checks, previews or carries out one action on one item.
func (e *Engine) single(ctx context.Context, r Request) (Result, error) {
	switch r.Action {
	case Retry, Skip, DeclareGap:
		if r.Projection == "" || r.Aggregate == "" {
			return Result{}, need(r.Action, "projection", "aggregate")
		}
		if r.Action == DeclareGap && r.To < 1 {
			return Result{}, need(r.Action, "to (the last missing version)")
		}
	case Replay, Dismiss, Ack:
		if r.ID < 1 {
			return Result{}, need(r.Action, "id")
		}
	case RebuildStart, RebuildRollback:
		if r.Projection == "" {
			return Result{}, need(r.Action, "projection")
		}
	case Repair:
		if r.Projection == "" {
			return Result{}, need(r.Action, "projection")
		}
		if e.Repairs == nil {
			return Result{}, fmt.Errorf("%w: this server reads no source (repair from 'inorder parked repair', or a console served by 'inorder run')", ErrUnsupported)
		}
		return e.repair(ctx, r)
	case RebuildDrop, RebuildSwitch:
		if r.Projection == "" || r.Generation < 1 {
			return Result{}, need(r.Action, "projection", "generation")
		}
	case EffectsRetry:
		if r.Key == "" {
			return Result{}, need(r.Action, "key")
		}
		if e.Effects == nil {
			return Result{}, fmt.Errorf("%w: this binary has no effect handlers", ErrUnsupported)
		}
	}
	if r.Action == RebuildStart && e.Rebuilds == nil {
		return Result{}, fmt.Errorf("%w: this server has no source to replay (start rebuilds with 'inorder rebuild', or from a console served by 'inorder run')", ErrUnsupported)
	}
	if !r.Confirm {
		res, err := e.preview(ctx, r)
		if err != nil {
			return Result{}, err
		}
		// The library's dry run: the action in a transaction rolled back.
		rep, err := e.perform(ctx, r, true)
		if err != nil {
			return Result{}, err
		}
		if rep.Message != "" {
			res.Message += "; dry run: " + rep.Message
			res.Reports = []projection.ActionReport{rep}
		}
		return res, nil
	}
	rep, err := e.perform(ctx, r, false)
	if err != nil {
		return Result{Action: r.Action, Message: err.Error(), Failed: 1, Failures: []string{err.Error()}}, err
	}
	return Result{Action: r.Action, Matched: 1, Done: 1, Message: rep.Message, Reports: []projection.ActionReport{rep}, Items: []any{}}, nil
}

// preview says what a single action would touch, reading the item as it
// is now; nothing changes.
func (e *Engine) preview(ctx context.Context, r Request) (Result, error) {
	p := e.Proc
	switch r.Action {
	case Retry, Skip:
		q, err := e.quarantined(ctx, r.Projection, r.Generation, r.Aggregate)
		if err != nil {
			return Result{}, err
		}
		parked, err := p.Parked(ctx, projection.ListOptions{Projection: r.Projection, Aggregate: r.Aggregate, Generation: r.Generation, OmitPayloads: true, Limit: BulkMax})
		if err != nil {
			return Result{}, err
		}
		what := fmt.Sprintf("apply version %d (%s) of %s again", q.Version, q.Type, r.Aggregate)
		if r.Action == Skip {
			what = fmt.Sprintf("advance %s past version %d (%s) WITHOUT applying it", r.Aggregate, q.Version, q.Type)
		}
		return one(r.Action, q, fmt.Sprintf("would %s in %s, then apply the parked events that follow in order (%d parked)",
			what, r.Projection, len(parked))), nil
	case DeclareGap:
		st, err := p.Aggregates(ctx, projection.ListOptions{Projection: r.Projection, Aggregate: r.Aggregate, Generation: r.Generation, Limit: 1})
		if err != nil {
			return Result{}, err
		}
		if len(st) == 0 {
			return Result{}, fmt.Errorf("%w: aggregate %q has no state in %s", projection.ErrNotFound, r.Aggregate, r.Projection)
		}
		if st[0].Quarantined {
			return Result{}, fmt.Errorf("%w: retry or skip its quarantined event first", projection.ErrQuarantined)
		}
		if r.To <= st[0].Version {
			return Result{}, fmt.Errorf("%w: version %d is already applied (at %d)", projection.ErrBadGap, r.To, st[0].Version)
		}
		return one(r.Action, st[0], fmt.Sprintf("would record versions %d…%d of %s in %s as missing at the source, then apply the parked events that follow (%d parked)",
			st[0].Version+1, r.To, r.Aggregate, r.Projection, st[0].Parked)), nil
	case Replay, Dismiss:
		rows, err := p.Rejected(ctx, projection.ListOptions{AfterID: r.ID - 1, Limit: 1, OmitPayloads: true})
		if err != nil {
			return Result{}, err
		}
		if len(rows) == 0 || rows[0].ID != r.ID {
			return Result{}, fmt.Errorf("%w: rejected delivery %d", projection.ErrNotFound, r.ID)
		}
		msg := fmt.Sprintf("would feed rejected delivery %d (%s version %d, %s) through the gate again", r.ID, rows[0].Aggregate, rows[0].Version, rows[0].Reason)
		if r.Action == Dismiss {
			msg = fmt.Sprintf("would dismiss rejected delivery %d (%s version %d, %s): it stays listed, resolved, and no longer counts as pending", r.ID, rows[0].Aggregate, rows[0].Version, rows[0].Reason)
		}
		return one(r.Action, rows[0], msg), nil
	case Ack:
		rows, err := p.Conflicts(ctx, projection.ListOptions{AfterID: r.ID - 1, Limit: 1, OmitPayloads: true})
		if err != nil {
			return Result{}, err
		}
		if len(rows) == 0 || rows[0].ID != r.ID {
			return Result{}, fmt.Errorf("%w: conflict %d", projection.ErrNotFound, r.ID)
		}
		msg := fmt.Sprintf("would acknowledge conflict %d (%s %s version %d)", r.ID, rows[0].Projection, rows[0].Aggregate, rows[0].Version)
		if !rows[0].AcknowledgedAt.IsZero() {
			msg = fmt.Sprintf("conflict %d is already acknowledged: nothing would change", r.ID)
		}
		return one(r.Action, rows[0], msg), nil
	case RebuildStart:
		return one(r.Action, map[string]string{"projection": r.Projection}, fmt.Sprintf(
			"would rebuild %s side by side in this process: a new generation replayed from the start of the stream, verified, then switched in (the live one keeps serving meanwhile)", r.Projection)), nil
	case RebuildRollback, RebuildDrop, RebuildSwitch:
		gens, err := p.Generations(ctx, r.Projection)
		if err != nil {
			return Result{}, err
		}
		for _, g := range gens {
			if r.Action == RebuildRollback && g.State == projection.StatePrevious {
				return one(r.Action, g, fmt.Sprintf("would make generation %d of %s live again (the live one becomes previous)", g.Generation, r.Projection)), nil
			}
			if r.Action == RebuildSwitch && g.Generation == r.Generation {
				if g.State != projection.StateCatchUp || g.Phase != projection.PhaseReady {
					return Result{}, fmt.Errorf("%w: generation %d is %s (%s)", projection.ErrNotReady, g.Generation, g.State, g.Phase)
				}
				return one(r.Action, g, fmt.Sprintf("would verify generation %d of %s and switch it in: readers, the HTTP API and the operator tools move to it in one transaction; the live one becomes previous (a rollback returns to it)", g.Generation, r.Projection)), nil
			}
			if r.Action == RebuildDrop && g.Generation == r.Generation {
				if g.State == projection.StateLive {
					return Result{}, fmt.Errorf("%w: generation %d", projection.ErrLiveGeneration, g.Generation)
				}
				return one(r.Action, g, fmt.Sprintf("would DROP generation %d of %s (%s): its tables and gate rows; no rollback to it afterwards", g.Generation, r.Projection, g.State)), nil
			}
		}
		if r.Action == RebuildRollback {
			return Result{}, fmt.Errorf("%w", projection.ErrNoPrevious)
		}
		return Result{}, fmt.Errorf("%w: generation %d of %s", projection.ErrNoGeneration, r.Generation, r.Projection)
	case EffectsRetry:
		before, err := e.Effects.Get(ctx, r.Key)
		if err != nil {
			return Result{}, err
		}
		fx, err := e.Effects.DryRunRetry(ctx, r.Key)
		if err != nil {
			return Result{}, err
		}
		return one(r.Action, fx, fmt.Sprintf("would reopen intent %s (%s, %s → %s) and enqueue it now", r.Key, fx.Kind, before.State, fx.State)), nil
	}
	return Result{}, fmt.Errorf("%w: %s", ErrBadRequest, r.Action)
}

func (e *Engine) quarantined(ctx context.Context, proj string, gen int, agg string) (projection.QuarantineEntry, error) {
	qs, err := e.Proc.Quarantined(ctx, projection.ListOptions{Projection: proj, Aggregate: agg, Generation: gen, Limit: 1, OmitPayloads: true})
	if err != nil {
		return projection.QuarantineEntry{}, err
	}
	if len(qs) == 0 {
		return projection.QuarantineEntry{}, fmt.Errorf("%w: %s in %s", projection.ErrNotQuarantined, agg, proj)
	}
	return qs[0], nil
}
