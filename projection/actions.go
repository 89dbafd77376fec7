package projection

import (
	"context"
	"errors"
	"fmt"
)

// This file holds what every operator action shares (operator.go has the
// actions on aggregates and rejected deliveries, switch.go those on
// generations): the options that say which generation an action is on,
// whether it is a dry run and who acts, and the report of what it did.
// The CLI's commands and the HTTP API's write endpoints call the same
// methods with the same options.

// ActionOptions say how an operator action runs. A nil *ActionOptions is the
// zero value: on the live generation, for real, by nobody named.
type ActionOptions struct {
	// Generation is the generation of the projection acted on (see
	// Processor.Generations); 0 means the live one. An action on a
	// generation the processor does not feed — of another code version, or
	// one nothing feeds any more (failed, retired, dropped) — fails with an
	// error wrapping ErrNotFed; one that does not exist, ErrNoGeneration.
	Generation int

	// DryRun runs the action in a transaction that is rolled back: the
	// report says what the action would have done — the versions, the
	// parked events it would apply, the rows it would resolve — and nothing
	// changes. The handlers the action calls run in that transaction too
	// (their writes go with it; a handler must not act outside its
	// transaction, see EventHandler).
	DryRun bool

	// By names who acts — a user name, "console:alice", "cron" — for the
	// operator log (OperatorLogEntry.By).
	By string

	// Reason says why, for the operator log. The CLI requires one for the
	// actions that cannot be undone (skip, declare-gap, dismiss, ack).
	Reason string
}

func (o *ActionOptions) orZero() ActionOptions {
	if o == nil {
		return ActionOptions{}
	}
	return *o
}

// ActionReport says what an operator action did or, in a dry run, would do.
// The CLI prints it (with --json as is) and the HTTP API returns it.
type ActionReport struct {
	// Action names the action as the operator log does: "retry", "skip",
	// "declare-gap", "replay-rejected", "dismiss-rejected", "ack-conflict",
	// "rebuild-rollback", "rebuild-drop".
	Action string `json:"action"`
	// Projection and Generation name the generation acted on (Generation
	// 0: none, for a rejected delivery that reached no projection).
	Projection string `json:"projection,omitempty"`
	Generation int    `json:"generation,omitempty"`
	// Aggregate is the aggregate acted on, if any.
	Aggregate string `json:"aggregate,omitempty"`
	// ID is the rejected delivery's or the conflict's id, for the actions
	// on them.
	ID int64 `json:"id,omitempty"`
	// Before and After are the aggregate's applied version before and
	// after the action (in a dry run: after it, had it committed).
	Before int64 `json:"before"`
	After  int64 `json:"after"`
	// Drained counts the parked events the action applied behind the
	// aggregate's new version.
	Drained int64 `json:"drained"`
	// Resolved lists the ids of the rejected deliveries the action
	// resolved (a declared gap resolves the rejected deliveries of the
	// versions it declares missing).
	Resolved []int64 `json:"resolved,omitempty"`
	// Outcomes is, for a replayed rejected delivery, its outcome in each
	// projection (by name).
	Outcomes map[string]string `json:"outcomes,omitempty"`
	// Deleted counts, for a dropped generation, the rows deleted per gate
	// table and the read-model tables dropped ("tables").
	Deleted map[string]int64 `json:"deleted,omitempty"`
	// Changed is false when the action found nothing to do (acknowledging
	// an acknowledged conflict, dismissing a resolved delivery).
	Changed bool `json:"changed"`
	// DryRun is set when nothing was committed.
	DryRun bool   `json:"dry_run"`
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Message says what happened in one sentence, for people.
	Message string `json:"message"`
}

// errDryRun rolls back the transaction of a dry run; the action's caller
// gets its report and no error.
var errDryRun = errors.New("projection: dry run")

// dryRunEnd ends a dry run's transaction: it returns errDryRun when o is a
// dry run, nil otherwise.
func dryRunEnd(o ActionOptions) error {
	if o.DryRun {
		return errDryRun
	}
	return nil
}

// settled turns the error of an action's transaction into the action's:
// errDryRun is the success of a dry run.
func settled(err error) error {
	if errors.Is(err, errDryRun) {
		return nil
	}
	return err
}

// target returns the registration of generation n of a projection (0: its
// live generation) for an operator action, which needs its gate key, its
// schema and a handler of its code version.
func (p *Processor) target(ctx context.Context, projection string, n int) (*registered, error) {
	if n < 0 {
		return nil, fmt.Errorf("projection %s: %w: generation %d", projection, ErrNoGeneration, n)
	}
	if n == 0 {
		return p.liveTarget(ctx, projection)
	}
	r, ok := p.byName[projection]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownProjection, projection)
	}
	gv, err := p.feeding(ctx)
	if err != nil {
		return nil, err
	}
	if gv.epoch == 0 { // fixed registrations: generation 1 alone
		if n == r.generation {
			return r, nil
		}
		return nil, fmt.Errorf("projection %s: %w: %d", projection, ErrNoGeneration, n)
	}
	key := generationKey(projection, n)
	for _, t := range gv.proc.projs {
		if t.name == projection && t.key == key {
			return t, nil
		}
	}
	// Not fed: say why.
	gens, err := p.Generations(ctx, projection)
	if err != nil {
		return nil, err
	}
	for _, g := range gens {
		if g.Generation != n {
			continue
		}
		switch g.State {
		case StateBuilding:
			return nil, fmt.Errorf("projection %s: generation %d is being built: only its rebuild feeds it: %w", projection, n, ErrNotFed)
		case StateFailed, StateRetired, StateDropped:
			return nil, fmt.Errorf("projection %s: generation %d is %s: nothing feeds it any more (drop it with 'rebuild drop'): %w",
				projection, n, g.State, ErrNotFed)
		}
		return nil, fmt.Errorf("projection %s: generation %d (%s) has code version %d and this process runs code version %d: %w",
			projection, n, g.State, g.CodeVersion, r.version, ErrNotFed)
	}
	return nil, fmt.Errorf("projection %s: %w: %d", projection, ErrNoGeneration, n)
}
