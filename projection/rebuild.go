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

// ErrNotResettable reports a rebuild of a projection that does not implement
// Resetter.
var ErrNotResettable = errors.New("projection does not implement Resetter")

// Replay feeds a whole stream, from its start, to emit in batches, and
// returns when it reaches the end (the position the stream had when the
// replay began is enough: live workers deliver what comes after). Each emit
// call is one transaction through the gate; emit is safe for concurrent use,
// and its errors must be returned (a rebuild whose emit failed fails).
type Replay func(ctx context.Context, emit func(ctx context.Context, events []aggregate.Event) error) error

// RebuildOptions configures Processor.Rebuild. A nil *RebuildOptions is valid.
type RebuildOptions struct {
	// Progress, if set, is called after each batch the replay emits, from
	// the goroutine that called emit.
	Progress func(RebuildProgress)
	// Total, if positive, is the number of events the replay will emit; it
	// makes RebuildProgress.ETA available.
	Total int64
	// By names who rebuilds, for the operator log (see ActionOptions.By).
	By string
}

// RebuildProgress reports a rebuild's progress.
type RebuildProgress struct {
	// Events counts the events emitted so far (deliveries, duplicates
	// included).
	Events int64
	// Elapsed is the time since the replay began.
	Elapsed time.Duration
	// Rate is Events per second of Elapsed.
	Rate float64
	// ETA estimates the time left from Rate and RebuildOptions.Total; zero
	// when Total is unknown.
	ETA time.Duration
}

// Rebuild rebuilds a projection from scratch: it empties its read model and
// gate state and replays the whole stream into it.
//
// While it runs, Rebuild holds the projection's rebuild lock — a session
// advisory lock on a dedicated pool connection — that every Process
// transaction and operator action of the projection takes in shared mode:
// live workers of the projection, in every process, pause until the rebuild
// ends (a batch that also feeds other projections pauses with it). Rebuild
// first waits for the transactions in flight to finish. The pool needs two
// connections beyond those the paused workers hold.
//
// In one transaction, Rebuild deletes the projection's version rows, applied
// log, parked and quarantined events and conflicts, calls its Resetter (the
// projection must implement it; else ErrNotResettable) and records
// "rebuild-start" in the operator log. It then runs replay, whose batches go
// through the gate of this projection only, and records "rebuild-done". The
// lock is released on return, also on error.
//
// A rebuild that fails or is killed half-way leaves the projection partly
// rebuilt; run it again: a rebuild always starts over from scratch.
func (p *Processor) Rebuild(ctx context.Context, projection string, replay Replay, opts *RebuildOptions) error {
	// In place: on the live generation, its gate key and its schema.
	r, err := p.liveTarget(ctx, projection)
	if err != nil {
		return err
	}
	resetter, ok := r.p.(Resetter)
	if !ok {
		return fmt.Errorf("projection %s: rebuild: %w", projection, ErrNotResettable)
	}
	if opts == nil {
		opts = &RebuildOptions{}
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
		if opts.Progress != nil {
			opts.Progress(progress(events, time.Since(start), opts.Total))
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

// progress computes a RebuildProgress.
func progress(events int64, elapsed time.Duration, total int64) RebuildProgress {
	pr := RebuildProgress{Events: events, Elapsed: elapsed}
	if s := elapsed.Seconds(); s > 0 {
		pr.Rate = float64(events) / s
	}
	if total > 0 && pr.Rate > 0 {
		pr.ETA = time.Duration(float64(max(total-events, 0)) / pr.Rate * float64(time.Second))
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
