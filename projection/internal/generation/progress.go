package generation

import (
	"context"
	"fmt"
	"time"
)

// This file holds the progress of a side-by-side rebuild (build.go): the
// phase recorded in the generation's row and the reports to
// Options.Progress.

// setPhase records the phase in the generation's row and reports it.
func (b *builder) setPhase(ctx context.Context, phase string, fraction func() float64) error {
	b.phase, b.phaseStart, b.phaseRead, b.fraction = phase, time.Now(), 0, fraction
	b.gen.Phase = phase
	if err := b.env.Store.Generations.SetPhase(ctx, b.env.Pool, b.gen.Key, phase); err != nil {
		return fmt.Errorf("record phase %s: %w", phase, err)
	}
	b.env.Log.InfoContext(ctx, "rebuild phase", "projection", b.proj.Name, "generation", b.gen.Generation, "phase", phase,
		"events", b.res.Events)
	b.report(true, "")
	return nil
}

// note reports a message.
func (b *builder) note(msg string) { b.report(true, msg) }

// report calls Options.Progress.
func (b *builder) report(force bool, note string) {
	if b.opts.Progress == nil {
		return
	}
	now := time.Now()
	if !force && now.Sub(b.lastShown) < 50*time.Millisecond {
		return
	}
	b.lastShown = now
	pr := Progress{Projection: b.proj.Name, Generation: b.gen.Generation, Phase: b.phase, Events: b.res.Events,
		PhaseEvents: b.phaseRead, Fraction: -1, Position: b.gen.Position, Note: note}
	if !b.phaseStart.IsZero() {
		pr.Elapsed = now.Sub(b.phaseStart)
	}
	if s := pr.Elapsed.Seconds(); s > 0 {
		pr.Rate = float64(pr.PhaseEvents) / s
	}
	if b.fraction != nil {
		pr.Fraction = b.fraction()
		if pr.Fraction > 0 && pr.Fraction < 1 {
			pr.ETA = time.Duration(float64(pr.Elapsed) * (1 - pr.Fraction) / pr.Fraction)
		}
	}
	b.opts.Progress(pr)
}
