package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/inorder/inorder/projection"
)

// perform carries one single action out through the library — or, with
// dryRun, runs it in a transaction that is rolled back (the library's dry
// run), so the report says what it would do.
func (e *Engine) perform(ctx context.Context, r Request, dryRun bool) (projection.ActionReport, error) {
	p := e.Proc
	o := &projection.ActionOptions{Generation: r.Generation, DryRun: dryRun, By: r.By, Reason: r.Reason}
	rep := projection.ActionReport{Action: r.Action, Projection: r.Projection, Generation: r.Generation, Aggregate: r.Aggregate,
		ID: r.ID, DryRun: dryRun, By: r.By, Reason: r.Reason}
	var err error
	switch r.Action {
	case Retry:
		rep, err = p.RetryQuarantined(ctx, r.Projection, r.Aggregate, o)
		var herr *projection.HandlerError
		if errors.As(err, &herr) {
			err = fmt.Errorf("the event still fails and stays quarantined: %w", err)
		}
	case Skip:
		rep, err = p.SkipQuarantined(ctx, r.Projection, r.Aggregate, o)
	case DeclareGap:
		rep, err = p.DeclareGap(ctx, r.Projection, r.Aggregate, r.To, o)
	case Replay:
		rep, err = p.ReplayRejected(ctx, r.ID, o)
	case Dismiss:
		rep, err = p.DismissRejected(ctx, r.ID, o)
	case Ack:
		rep, err = p.AckConflict(ctx, r.ID, o)
	case RebuildRollback:
		rep, err = p.Rollback(ctx, r.Projection, o)
	case RebuildDrop:
		rep, err = p.DropGeneration(ctx, r.Projection, o)
	case RebuildStart:
		if dryRun {
			break
		}
		err = e.Rebuilds.StartRebuild(ctx, r.Projection, r.By, &projection.BuildOptions{Hold: true, ExpectChanges: r.ExpectChanges, By: r.By}, func(error) {})
		rep.Message, rep.Changed = "rebuild started: it waits, caught up, for rebuild-switch", err == nil
	case RebuildSwitch:
		if dryRun {
			break
		}
		err = p.Switch(ctx, r.Projection, r.Generation, r.By)
		rep.Message, rep.Changed = fmt.Sprintf("switch of generation %d requested: it is live once verified", r.Generation), err == nil
	case EffectsRetry:
		if dryRun {
			break
		}
		_, err = e.Effects.Retry(ctx, r.Key)
		rep.Message, rep.Changed = "intent reopened and enqueued", err == nil
	default:
		err = fmt.Errorf("%w: %s", ErrBadRequest, r.Action)
	}
	return rep, err
}
