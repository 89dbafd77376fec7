package ops

import (
	"context"
	"errors"
	"fmt"

	"github.com/inorder/inorder/projection"
)

// perform carries one single action out through the library.
func (e *Engine) perform(ctx context.Context, r Request) (Report, error) {
	p := e.Proc
	rep := Report{Action: r.Action, Projection: r.Projection, Aggregate: r.Aggregate, ID: r.ID}
	reason := r.Reason
	if r.By != "" {
		reason = fmt.Sprintf("%s (by %s)", r.Reason, r.By)
	}
	var err error
	switch r.Action {
	case Retry:
		err = p.RetryQuarantined(ctx, r.Projection, r.Aggregate)
		rep.Message = "quarantined event applied, and the parked events after it"
		var herr *projection.HandlerError
		if errors.As(err, &herr) {
			err = fmt.Errorf("the event still fails and stays quarantined: %w", err)
		}
	case Skip:
		err = p.SkipQuarantined(ctx, r.Projection, r.Aggregate, reason)
		rep.Message = "quarantined event skipped"
	case DeclareGap:
		err = p.DeclareGap(ctx, r.Projection, r.Aggregate, r.To, reason)
		rep.Message = fmt.Sprintf("versions up to %d declared missing", r.To)
	case Replay:
		var res projection.Result
		res, err = p.ReplayRejected(ctx, r.ID)
		rep.Message = "replayed: " + res.Outcome.String()
	case Dismiss:
		err = fmt.Errorf("%w: dismissing a rejected delivery", ErrUnsupported)
	case Ack:
		err = p.AckConflict(ctx, r.ID, reason)
		rep.Message = "conflict acknowledged"
	case RebuildStart:
		err = e.Rebuilds.StartRebuild(ctx, r.Projection, r.By, &projection.BuildOptions{Hold: true, ExpectChanges: r.ExpectChanges}, func(error) {})
		rep.Message = "rebuild started"
	case RebuildSwitch:
		err = p.Switch(ctx, r.Projection, r.Generation, r.By)
		rep.Message = fmt.Sprintf("switch of generation %d requested: it is live once verified", r.Generation)
	case RebuildRollback:
		var gen int
		gen, err = p.Rollback(ctx, r.Projection)
		rep.Message = fmt.Sprintf("generation %d is live again", gen)
	case RebuildDrop:
		err = p.DropGeneration(ctx, r.Projection, r.Generation)
		rep.Message = fmt.Sprintf("generation %d dropped", r.Generation)
	case EffectsRetry:
		_, err = e.Effects.Retry(ctx, r.Key)
		rep.Message = "intent reopened and enqueued"
	default:
		err = fmt.Errorf("%w: %s", ErrBadRequest, r.Action)
	}
	if err != nil {
		return rep, err
	}
	return rep, nil
}
