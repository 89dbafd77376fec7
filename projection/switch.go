package projection

import (
	"context"
	"fmt"

	"github.com/inorder/inorder/projection/internal/generation"
)

// This file holds the operator actions on generations: the switch of a
// held rebuild, rollback and drop, over package internal/generation.

// Switch asks the rebuild holding generation of a projection (one built
// with BuildOptions.Hold, now in PhaseReady) to verify it and switch it in,
// and records the request, by opts.By, in the operator log. It returns once
// the request is recorded; the generation is live once the rebuild's
// verification passed (see Generations). A generation that is not waiting
// for a switch wraps ErrNotReady.
func (p *Processor) Switch(ctx context.Context, projection string, generation int, by string) error {
	if _, ok := p.byName[projection]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownProjection, projection)
	}
	return requestSwitch(ctx, p.genEnv(), projection, generation, by)
}

// requestSwitch is generation.RequestSwitch, which Switch's parameter
// generation hides.
func requestSwitch(ctx context.Context, env *generation.Env, projection string, n int, by string) error {
	return generation.RequestSwitch(ctx, env, projection, n, by)
}

// Rollback makes a projection's previous generation live again, and the
// live one previous (still fed, until the previous one's retention
// ends): one transaction, so readers move from one to the other at once.
// The previous generation is exact only while processors of its code
// version feed it. The report's Generation is the generation live after it
// (Before and After: the live generation before and after); ErrNoPrevious
// when there is none (retired or dropped). opts.Generation is ignored.
func (p *Processor) Rollback(ctx context.Context, projection string, opts *ActionOptions) (ActionReport, error) {
	o := opts.orZero()
	rep := ActionReport{Action: "rebuild-rollback", Projection: projection, DryRun: o.DryRun, By: o.By, Reason: o.Reason}
	if _, ok := p.byName[projection]; !ok {
		return rep, fmt.Errorf("%w: %q", ErrUnknownProjection, projection)
	}
	if _, err := p.feeding(ctx); err != nil {
		return rep, err
	}
	live, prev, err := generation.Rollback(ctx, p.genEnv(), projection, o.By, o.Reason, func() error { return dryRunEnd(o) })
	if prev != 0 {
		rep.Generation, rep.Before, rep.After, rep.Changed = prev, int64(live), int64(prev), true
		rep.Message = fmt.Sprintf("generation %d of %s live again; generation %d previous", prev, projection, live)
	}
	if err = settled(err); err != nil {
		return rep, fmt.Errorf("projection %s: rollback: %w", projection, err)
	}
	return rep, nil
}

// DropGeneration drops a generation that is not live: its schema (or, for
// generation 1, whose tables are in the connection's search_path, their
// rows, through the projection's Tables.Reset) and its gate rows. A generation
// being built can be dropped only while no Build runs (else
// ErrBuildInProgress). The generation is opts.Generation: 0 is the live
// one, which is refused (ErrLiveGeneration). Dropping a dropped generation
// does nothing (ActionReport.Changed is false). A dry run counts what would
// go (ActionReport.Deleted) and changes nothing, the generation's state
// included.
func (p *Processor) DropGeneration(ctx context.Context, projection string, opts *ActionOptions) (ActionReport, error) {
	o := opts.orZero()
	n := o.Generation
	rep := ActionReport{Action: "rebuild-drop", Projection: projection, Generation: n, DryRun: o.DryRun, By: o.By, Reason: o.Reason}
	r, ok := p.byName[projection]
	if !ok {
		return rep, fmt.Errorf("%w: %q", ErrUnknownProjection, projection)
	}
	env := p.genEnv()
	gens, err := p.generationRows(ctx, projection)
	if err != nil {
		return rep, err
	}
	for _, g := range gens {
		if g.Generation != n && (n != 0 || g.State != StateLive) {
			continue
		}
		rep.Generation = g.Generation
		switch g.State {
		case StateLive:
			return rep, fmt.Errorf("projection %s: drop generation %d: %w", projection, g.Generation, ErrLiveGeneration)
		case StateDropped:
			rep.Message = fmt.Sprintf("generation %d of %s is dropped already: nothing to do", g.Generation, projection)
			return rep, nil
		case StateBuilding, StateCatchUp:
			// Only while nobody builds it: hold the build lock meanwhile.
			release, ok, err := generation.HoldBuildLock(ctx, env, p.genProjection(r))
			if err != nil {
				return rep, err
			}
			if !ok {
				return rep, fmt.Errorf("projection %s: drop generation %d: %w", projection, g.Generation, ErrBuildInProgress)
			}
			defer release()
		}
		if o.DryRun {
			rep.Deleted, err = generation.Preview(ctx, env, g)
			if err != nil {
				return rep, fmt.Errorf("projection %s: drop generation %d: %w", g.Projection, g.Generation, err)
			}
			where := "its tables in schema " + g.Schema
			if g.Schema == "" {
				where = "the rows of its tables (generation 1: in the connection's search_path, through the projection's Reset)"
			}
			rep.Message = fmt.Sprintf("would drop generation %d of %s (code version %d, %s): %s and its gate rows",
				g.Generation, g.Projection, g.CodeVersion, g.State, where)
			return rep, nil
		}
		rep.Deleted, err = generation.Drop(ctx, env, p.genProjection(r), g, o.By, o.Reason)
		if err != nil {
			return rep, err
		}
		rep.Changed = true
		rep.Message = fmt.Sprintf("generation %d of %s (code version %d, was %s) dropped", g.Generation, projection, g.CodeVersion, g.State)
		return rep, nil
	}
	return rep, fmt.Errorf("projection %s: %w: %d", projection, ErrNoGeneration, n)
}
