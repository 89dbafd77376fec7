package generation

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the operator-driven cut-over of a side-by-side rebuild:
// a Build with Options.Hold stops before the switch, in PhaseReady,
// keeping the new generation current, until an operator requests the
// switch (RequestSwitch) — from any process.

// holdPoll is how often a held rebuild reads the stream again and looks for
// a switch request.
const holdPoll = 500 * time.Millisecond

// hold keeps a caught-up generation current until an operator asks for the
// switch.
func (b *builder) hold(ctx context.Context) error {
	gens := b.env.Store.Generations
	phase, _, err := gens.PhaseState(ctx, b.env.Pool, b.gen.Key)
	if err != nil {
		return fmt.Errorf("read generation: %w", err)
	}
	if phase != PhaseSwitchRequested { // a resumed rebuild may have one already
		if err := b.setPhase(ctx, PhaseReady, nil); err != nil {
			return err
		}
		b.note(fmt.Sprintf("generation %d is caught up: waiting for an operator's switch", b.gen.Generation))
	}
	t := time.NewTicker(holdPoll)
	defer t.Stop()
	for {
		phase, state, err := gens.PhaseState(ctx, b.env.Pool, b.gen.Key)
		if err != nil {
			return fmt.Errorf("read generation: %w", err)
		}
		switch {
		case state != StateCatchUp:
			return fmt.Errorf("generation %d is %s, no longer in catch-up", b.gen.Generation, state)
		case phase == PhaseSwitchRequested:
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if _, err := b.catchUpPass(ctx); err != nil {
			return err
		}
	}
}

// RequestSwitch asks the rebuild holding generation of the projection
// (in PhaseReady) to verify it and switch it in, and records the request,
// by by, in the operator log (projection.Processor.Switch). A generation
// that is not waiting for a switch wraps Errors.NotReady.
func RequestSwitch(ctx context.Context, env *Env, projection string, generation int, by string) error {
	err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		ok, err := env.Store.Generations.RequestSwitch(ctx, tx, projection, generation, PhaseSwitchRequested, PhaseReady)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: generation %d of %s", env.Errors.NotReady, generation, projection)
		}
		return env.Store.OpLog.Insert(ctx, tx, store.OpEntry{Action: "rebuild-switch-request", Projection: projection, Generation: generation,
			To: int64(generation), Reason: fmt.Sprintf("switch of generation %d requested", generation), Actor: by})
	})
	if err != nil {
		return fmt.Errorf("projection %s: switch generation %d: %w", projection, generation, err)
	}
	return nil
}
