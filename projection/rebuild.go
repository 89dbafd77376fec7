package projection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection/internal/store"
)

// ErrNotResettable reports an in-place rebuild (Processor.Build with
// BuildOptions.InPlace) of a projection that does not implement Tables.
var ErrNotResettable = errors.New("projection does not implement Tables")

// This file holds the in-place rebuild: Processor.Build with
// BuildOptions.InPlace (build.go has the side-by-side one).

// Replay feeds a whole stream, from its start, to emit in batches, and
// returns when it reaches the end (the position the stream had when the
// replay began is enough: live workers deliver what comes after): the
// history an in-place rebuild replays (BuildOptions.Replay). Each emit
// call is one transaction through the gate; emit is safe for concurrent use,
// and its errors must be returned (a rebuild whose emit failed fails).
//
// A Stream, which a side-by-side rebuild reads, is read by one goroutine
// from a position; a Replay may emit from several goroutines (an
// aggregate's events in order), in batches of its own size.
type Replay func(ctx context.Context, emit func(ctx context.Context, events []aggregate.Event) error) error

// inPlace is Build with BuildOptions.InPlace: it rebuilds a projection from
// scratch, emptying its read model and gate state and replaying the whole
// stream into it (see Processor.Build, In place). Its errors name the
// projection and "rebuild" (side by side: "build generation N").
func (p *Processor) inPlace(ctx context.Context, projection string, opts *BuildOptions) (BuildResult, error) {
	began := time.Now()
	res := BuildResult{Projection: projection}
	err := p.runInPlace(ctx, projection, opts, &res)
	res.Elapsed = time.Since(began)
	return res, err
}

// runInPlace runs inPlace, filling res.
func (p *Processor) runInPlace(ctx context.Context, projection string, opts *BuildOptions, res *BuildResult) error {
	// In place: on the live generation, its gate key and its schema.
	r, err := p.liveTarget(ctx, projection)
	if err != nil {
		return err
	}
	resetter, ok := r.p.(Tables)
	if !ok {
		return fmt.Errorf("projection %s: rebuild: %w", projection, ErrNotResettable)
	}
	res.Generation, res.CodeVersion = r.generation, r.version
	replay := opts.Replay
	if replay == nil {
		return fmt.Errorf("projection %s: rebuild: BuildOptions.Replay is required in place", projection)
	}
	fail := func(what string, err error) error {
		return fmt.Errorf("projection %s: rebuild: %s: %w", projection, what, err)
	}

	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return fail("acquire lock connection", err)
	}
	defer conn.Release()
	p.log.InfoContext(ctx, "rebuild waiting for the projection's lock", "projection", projection)
	if err := p.store.Locks.Session(ctx, conn, r.lockKey); err != nil {
		// A cancelled wait may have closed the connection; the lock, if it
		// was granted, went with the session.
		return fail("take lock", err)
	}
	defer func() {
		// The lock must go even if ctx is done: unlock without it, and if
		// that fails close the session, which releases it.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if released, uerr := p.store.Locks.Release(uctx, conn, r.lockKey); uerr != nil || !released {
			p.log.WarnContext(uctx, "rebuild could not unlock; closing its connection", "projection", projection, "error", uerr)
			_ = conn.Conn().Close(uctx)
		}
	}()

	start := time.Now()
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		p.store.Gate.QueueClear(b, r.key, nil)
		p.buf.QueueClear(b, r.key)
		// Processors reload their view of the generations, and forget
		// the rows they wrote (see rowCache).
		p.store.Epoch.QueueBump(b)
		p.store.OpLog.Queue(b, store.OpEntry{Action: "rebuild-start", Projection: projection, Actor: opts.By})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("delete gate state: %w", err)
		}
		return inSchema(ctx, tx, r.schema, func() error {
			if err := resetter.Reset(ctx, tx); err != nil {
				return fmt.Errorf("reset read model: %w", err)
			}
			return nil
		})
	})
	if err != nil {
		return fail("reset", err)
	}
	p.log.InfoContext(ctx, "rebuild started", "projection", projection)

	solo := p.solo(r)
	var mu sync.Mutex // emit may be called from several goroutines
	var events int64
	var emitErr error
	emit := func(ctx context.Context, batch []aggregate.Event) error {
		_, err := solo.Process(ctx, Batch{Events: batch, Source: "rebuild:" + projection})
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			emitErr = cmp.Or(emitErr, err)
			return err
		}
		events += int64(len(batch))
		res.Events = events
		if opts.Progress != nil {
			opts.Progress(inPlaceProgress(r, events, time.Since(start), opts.Total))
		}
		return nil
	}
	if err := replay(ctx, emit); err != nil {
		return fail("replay", err)
	}
	if emitErr != nil {
		// The replay swallowed it; the rebuild is incomplete all the same.
		return fail("replay", emitErr)
	}
	if err := p.store.OpLog.Insert(ctx, p.pool, store.OpEntry{Action: "rebuild-done", Projection: projection,
		Reason: fmt.Sprintf("%d events in %v", events, time.Since(start).Round(time.Millisecond)), Actor: opts.By}); err != nil {
		return fail("log", err)
	}
	p.log.InfoContext(ctx, "rebuild done", "projection", projection, "events", events, "elapsed", time.Since(start))
	return nil
}

// inPlaceProgress computes the BuildProgress of an in-place rebuild of r
// that emitted events in elapsed, of total if positive.
func inPlaceProgress(r *registered, events int64, elapsed time.Duration, total int64) BuildProgress {
	pr := BuildProgress{Projection: r.name, Generation: r.generation, Phase: PhaseReplay, Events: events, PhaseEvents: events,
		Elapsed: elapsed, Fraction: -1}
	if s := elapsed.Seconds(); s > 0 {
		pr.Rate = float64(events) / s
	}
	if total > 0 {
		pr.Fraction = min(float64(events)/float64(total), 1)
		if pr.Rate > 0 {
			pr.ETA = time.Duration(float64(max(total-events, 0)) / pr.Rate * float64(time.Second))
		}
	}
	return pr
}

// solo returns a processor that feeds only r's projection and does not take
// the rebuild lock (its caller holds it exclusively). It shares p's pool,
// configuration and statements; its counts are its own.
func (p *Processor) solo(r *registered) *Processor {
	nr := &registered{name: r.name, key: r.key, generation: r.generation, schema: r.schema, version: r.version, p: r.p, event: r.event, batch: r.batch,
		lockKey: r.lockKey, stats: &counters{}}
	return p.derive(nr)
}
