package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/clikit"
)

// startEffects starts the workload's effects: River's tables in the demo
// schema, an effects client on the receiver, handed to the projections.
func (d *demoRun) startEffects(ctx context.Context) error {
	fxw := d.o.demo.Effects
	if fxw == nil {
		return nil
	}
	if _, err := effects.MigrateRiver(ctx, d.pool, &effects.RiverMigrateOptions{Schema: d.o.Schema, Logger: d.logger}); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.recv = newReceiver()
	d.cleanup = append(d.cleanup, d.recv.srv.Close)
	fx, err := effects.New(d.pool, &effects.Config{
		Schema: d.o.Schema, Logger: d.logger, Workers: 8,
		RetryBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, PollInterval: 100 * time.Millisecond,
	}, fxw.Handlers(d.recv.srv.URL)...)
	if err != nil {
		return fmt.Errorf("demo: effects: %w", err)
	}
	effects.Bind(fx, d.a.Projections()...)
	if err := fx.RegisterMetrics(d.metrics.Registry()); err != nil {
		return fmt.Errorf("demo: effects metrics: %w", err)
	}
	if err := fx.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("demo: effects: %w", err)
	}
	d.fx = fx
	d.cleanup = append(d.cleanup, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := fx.Stop(sctx); err != nil {
			d.logger.Warn("stop effects", "error", err)
		}
	})
	return nil
}

// effectsReport is what awaitEffects found.
type effectsReport struct {
	expected, applied, deliveries, refused int
	// repeats counts deliveries accepted for a key already applied: a call
	// whose outcome was lost and that was made again with the same key.
	repeats int
	err     error
}

// awaitEffects waits until the receiver has every expected notification
// (at most timeout), then checks that it got each once and nothing else.
func (d *demoRun) awaitEffects(ctx context.Context, timeout time.Duration) *effectsReport {
	fxw := d.o.demo.Effects
	if fxw == nil || d.recv == nil {
		return nil
	}
	// The events as the source delivers them: with the event store's ids,
	// which the idempotency keys are derived from.
	delivered := make([]aggregate.Event, len(d.events))
	for i, e := range d.events {
		e.ID = demoEventID(e).String()
		delivered[i] = e
	}
	want, err := fxw.Expected(delivered)
	if err != nil {
		return &effectsReport{err: err}
	}
	r := &effectsReport{expected: len(want)}
	deadline := time.After(timeout)
	// The effects go out after the commits, retried with backoff where the
	// receiver refused them: show them arrive rather than look hung.
	bar := clikit.NewProgressBar(d.con, "notified", fxw.What, int64(len(want)))
	defer func() { bar.Finish(int64(r.applied)) }()
	for {
		accepted, deliveries, refused, changed := d.recv.snapshot()
		r.applied, r.deliveries, r.refused = len(accepted), deliveries, refused
		bar.Update(int64(r.applied))
		if len(accepted) >= len(want) {
			for k, n := range accepted {
				if !want[k] {
					r.err = fmt.Errorf("the receiver got a notification no event asked for (key %s)", k)
					return r
				}
				r.repeats += n - 1
			}
			return r
		}
		select {
		case <-changed:
		case <-deadline:
			r.err = fmt.Errorf("%d of %d %s notified after %s", r.applied, len(want), fxw.What, timeout)
			return r
		case <-ctx.Done():
			r.err = ctx.Err()
			return r
		}
	}
}

// line is the report's summary line.
func (r *effectsReport) line(what string) string {
	if r.err != nil {
		return fmt.Sprintf("NOT verified: %v", r.err)
	}
	s := fmt.Sprintf("%d %s notified, each once (%d deliveries: %d refused with a 503 and retried with the same idempotency key",
		r.applied, what, r.deliveries, r.refused)
	if r.repeats > 0 {
		s += fmt.Sprintf("; %d repeats of an uncertain call, absorbed by the receiver's idempotency keys", r.repeats)
	}
	return s + ")"

}
