package generation

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the in-place rebuild (projection.Processor.Build with
// BuildOptions.InPlace, which documents it): the live generation emptied
// and replayed through its own gate while the projection's rebuild lock
// pauses its workers.

// Live is the generation an in-place rebuild rebuilds: the projection's
// live one, as the processor feeds it.
type Live struct {
	Key, Schema string
	Generation  int
}

// InPlaceOptions configures InPlace (projection.BuildOptions' fields of
// the in-place mode).
type InPlaceOptions struct {
	// Replay is the source's history (projection.Replay).
	Replay   func(ctx context.Context, emit func(ctx context.Context, events []aggregate.Event) error) error
	Total    int64
	By       string
	Progress func(Progress)
}

// InPlace rebuilds generation live of the projection in place: under the
// projection's rebuild lock, it empties the generation's gate state and,
// through tables' Reset, its read model, then replays opts.Replay through
// the generation's gate. It fills res.Events as it goes; its errors name
// the projection and "rebuild".
func InPlace(ctx context.Context, env *Env, proj Projection, live Live, tables Tables, opts InPlaceOptions, res *Result) error {
	st, name := env.Store, proj.Name
	fail := func(what string, err error) error {
		return fmt.Errorf("projection %s: rebuild: %s: %w", name, what, err)
	}

	conn, err := env.Pool.Acquire(ctx)
	if err != nil {
		return fail("acquire lock connection", err)
	}
	defer conn.Release()
	env.Log.InfoContext(ctx, "rebuild waiting for the projection's lock", "projection", name)
	if err := st.Locks.Session(ctx, conn, proj.Lock); err != nil {
		// A cancelled wait may have closed the connection; the lock, if it
		// was granted, went with the session.
		return fail("take lock", err)
	}
	defer func() {
		// The lock must go even if ctx is done: unlock without it, and if
		// that fails close the session, which releases it.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if released, uerr := st.Locks.Release(uctx, conn, proj.Lock); uerr != nil || !released {
			env.Log.WarnContext(uctx, "rebuild could not unlock; closing its connection", "projection", name, "error", uerr)
			_ = conn.Conn().Close(uctx)
		}
	}()

	start := time.Now()
	err = pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		st.Gate.QueueClear(b, live.Key, nil)
		env.Buffer.QueueClear(b, live.Key)
		// Processors reload their view of the generations, and forget
		// the rows they wrote.
		st.Epoch.QueueBump(b)
		st.OpLog.Queue(b, store.OpEntry{Action: "rebuild-start", Projection: name, Actor: opts.By})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("delete gate state: %w", err)
		}
		return InSchema(ctx, tx, live.Schema, func() error {
			if err := tables.Reset(ctx, tx); err != nil {
				return fmt.Errorf("reset read model: %w", err)
			}
			return nil
		})
	})
	if err != nil {
		return fail("reset", err)
	}
	env.Log.InfoContext(ctx, "rebuild started", "projection", name)

	gate := proj.Gate.On(live.Key, live.Schema)
	var mu sync.Mutex // emit may be called from several goroutines
	var events int64
	var emitErr error
	emit := func(ctx context.Context, batch []aggregate.Event) error {
		err := gate.Process(ctx, Batch{Events: batch, Source: "rebuild:" + name})
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			emitErr = cmp.Or(emitErr, err)
			return err
		}
		events += int64(len(batch))
		res.Events = events
		if opts.Progress != nil {
			opts.Progress(inPlaceProgress(name, live.Generation, events, time.Since(start), opts.Total))
		}
		return nil
	}
	if err := opts.Replay(ctx, emit); err != nil {
		return fail("replay", err)
	}
	if emitErr != nil {
		// The replay swallowed it; the rebuild is incomplete all the same.
		return fail("replay", emitErr)
	}
	if err := st.OpLog.Insert(ctx, env.Pool, store.OpEntry{Action: "rebuild-done", Projection: name,
		Reason: fmt.Sprintf("%d events in %v", events, time.Since(start).Round(time.Millisecond)), Actor: opts.By}); err != nil {
		return fail("log", err)
	}
	env.Log.InfoContext(ctx, "rebuild done", "projection", name, "events", events, "elapsed", time.Since(start))
	return nil
}

// inPlaceProgress computes the Progress of an in-place rebuild of
// generation n of projection that emitted events in elapsed, of total if
// positive.
func inPlaceProgress(projection string, n int, events int64, elapsed time.Duration, total int64) Progress {
	pr := Progress{Projection: projection, Generation: n, Phase: PhaseReplay, Events: events, PhaseEvents: events,
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
