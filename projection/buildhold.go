package projection

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the operator-driven cut-over of a side-by-side rebuild:
// a Build with BuildOptions.Hold stops before the switch, in PhaseReady,
// keeping the new generation current, until an operator calls Switch —
// from any process (the console's switch button does).

// Phases of a held rebuild (Generation.Phase).
const (
	// PhaseReady: the generation is caught up and waits for an operator's
	// Switch (BuildOptions.Hold); it stays in catch-up, fed.
	PhaseReady = "ready"
	// PhaseSwitchRequested: an operator asked for the switch; the rebuild
	// verifies and switches it in.
	PhaseSwitchRequested = "switch-requested"
)

// holdPoll is how often a held rebuild reads the stream again and looks for
// a switch request.
const holdPoll = 500 * time.Millisecond

// ErrNotReady reports a Switch of a generation that is not waiting for
// one: not held, not caught up yet, or already switched.
var ErrNotReady = errors.New("the generation is not ready to switch")

// hold keeps a caught-up generation current until an operator asks for the
// switch.
func (b *builder) hold(ctx context.Context) error {
	phase, _, err := b.p.store.Generations.PhaseState(ctx, b.p.pool, b.gen.Key)
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
		phase, state, err := b.p.store.Generations.PhaseState(ctx, b.p.pool, b.gen.Key)
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
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		ok, err := p.store.Generations.RequestSwitch(ctx, tx, projection, generation, PhaseSwitchRequested, PhaseReady)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: generation %d of %s", ErrNotReady, generation, projection)
		}
		return p.store.OpLog.Insert(ctx, tx, store.OpEntry{Action: "rebuild-switch-request", Projection: projection, Generation: generation,
			To: int64(generation), Reason: fmt.Sprintf("switch of generation %d requested", generation), Actor: by})
	})
	if err != nil {
		return fmt.Errorf("projection %s: switch generation %d: %w", projection, generation, err)
	}
	return nil
}
