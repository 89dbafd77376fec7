package generation

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds side-by-side rebuilds: Build and the steps of the
// generation it builds — create or resume it, replay (replay.go,
// finalize.go), catch up, hold (hold.go), verify and switch (switch.go).
// lock.go has the build lock, progress.go the phases and progress
// reports. inplace.go has the in-place mode.

// Build rebuilds the projection side by side (projection.Processor.Build
// without BuildOptions.InPlace, which documents it), with opts' defaults
// applied. The processor's generations must have been loaded once (its
// first generation recorded). Its errors name the projection and the
// generation, but a *VerificationError, returned as it is.
func Build(ctx context.Context, env *Env, proj Projection, opts Options) (Result, error) {
	b := &builder{env: env, proj: proj, opts: opts, start: time.Now(), res: Result{Projection: proj.Name, CodeVersion: proj.Version}}
	err := b.run(ctx)
	b.res.Elapsed = time.Since(b.start)
	if err != nil {
		var verr *VerificationError
		if errors.As(err, &verr) {
			return b.res, err
		}
		return b.res, fmt.Errorf("projection %s: build generation %d: %w", proj.Name, b.gen.Generation, err)
	}
	return b.res, nil
}

// builder is one Build call.
type builder struct {
	env   *Env
	proj  Projection
	opts  Options
	start time.Time
	res   Result
	conn  *pgxpool.Conn // holds the build lock; the replay writes through it
	gen   store.Generation
	// gate is the gate of the new generation alone: the gate of the
	// replay's events that do not continue their aggregate.
	gate Target
	// feed is the catch-up's gate: it feeds every generation of the
	// projection that the processors of its code version feed — the new
	// one, and the live one when the code version did not change — in the
	// same transactions, as they do (see catchUpPass).
	feed Processor

	phase      string
	phaseStart time.Time
	phaseRead  int64
	fraction   func() float64
	lastShown  time.Time
}

func (b *builder) run(ctx context.Context) error {
	env := b.env
	conn, err := env.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire a connection: %w", err)
	}
	b.conn = conn
	defer conn.Release()
	waitedFor, err := b.lock(ctx)
	if err != nil {
		return err
	}
	defer b.unlock(ctx)

	gens, err := env.Store.Generations.List(ctx, env.Pool, b.proj.Name)
	if err != nil {
		return fmt.Errorf("projection %s: list generations: %w", b.proj.Name, err)
	}
	for _, g := range gens {
		switch {
		case g.State == StateLive:
			b.res.Previous = g.Generation
			if waitedFor != 0 && g.Generation == waitedFor {
				// The build this one waited for completed.
				b.gen, b.res.Generation, b.res.AlreadyLive = g, g.Generation, true
				return nil
			}
		case g.State == StateBuilding || g.State == StateCatchUp:
			if g.CodeVersion == b.proj.Version {
				b.gen, b.res.Resumed = g, true
				continue
			}
			if err := setFailed(ctx, env, g, fmt.Sprintf("superseded by a rebuild with code version %d", b.proj.Version)); err != nil {
				return err
			}
		case g.State == StateRetired:
			if _, err := Drop(ctx, env, b.proj, g, b.opts.By, ""); err != nil {
				return err
			}
		}
	}
	if !b.res.Resumed {
		if err := b.create(ctx); err != nil {
			return err
		}
	}
	b.res.Generation = b.gen.Generation
	b.gate = b.proj.Gate.On(b.gen.Key, b.gen.Schema)
	if b.feed, err = b.proj.Gate.Fed(); err != nil {
		return err
	}
	env.Log.InfoContext(ctx, "rebuild side by side", "projection", b.proj.Name, "generation", b.gen.Generation,
		"code_version", b.proj.Version, "state", b.gen.State, "resumed", b.res.Resumed)

	if b.gen.State == StateBuilding {
		if err := b.replay(ctx); err != nil {
			return err
		}
		if err := b.finalize(ctx); err != nil {
			return err
		}
	}
	if err := b.catchUp(ctx); err != nil {
		return err
	}
	if b.opts.Hold {
		if err := b.hold(ctx); err != nil {
			return err
		}
	}
	return b.verifyAndSwitch(ctx)
}

// create records a new generation, in state building.
func (b *builder) create(ctx context.Context) error {
	st := b.env.Store
	name := b.proj.Name
	err := pgx.BeginFunc(ctx, b.env.Pool, func(tx pgx.Tx) error {
		n, err := st.Generations.Next(ctx, tx, name)
		if err != nil {
			return err
		}
		key, schema := b.proj.Gate.Names(n)
		row, err := st.Generations.Insert(ctx, tx, name, n, b.proj.Version, key, schema)
		b.gen = row
		if err != nil {
			return err
		}
		return st.OpLog.Insert(ctx, tx, store.OpEntry{Action: "rebuild-start", Projection: name, Generation: n, To: n,
			Reason: fmt.Sprintf("side by side: generation %d, code version %d, schema %s", n, b.proj.Version, schema), Actor: b.opts.By})
	})
	if err != nil {
		return fmt.Errorf("create generation: %w", err)
	}
	return nil
}

// catchUp reads the stream from the generation's position to its end
// through the gate, storing the position with each batch, until a pass
// reads no more than Options.CatchUpEvents records.
func (b *builder) catchUp(ctx context.Context) error {
	if err := b.setPhase(ctx, PhaseCatchUp, b.opts.Fraction); err != nil {
		return err
	}
	for {
		n, err := b.catchUpPass(ctx)
		if err != nil {
			return err
		}
		if n <= b.opts.CatchUpEvents {
			return nil
		}
	}
}

// catchUpPass reads the stream from the generation's position to its end
// once, through the gate, and returns the records it read.
//
// Its batches feed what a worker of the generation's code version feeds:
// the new generation and, when the code version did not change, the live
// one, in the same transactions. So from the replay's end on, both
// generations receive every event the same way — the workers' and the
// rebuild's — and the new one is never ahead of the live one by what the
// rebuild read before lagging workers delivered it: the two differ only by
// the events up to the replay's end that the workers have not delivered
// yet, and are equal at every snapshot once they have (see
// verifyAndSwitch). The live generation meets the rebuild's events as
// redeliveries or early arrivals, which the gate makes harmless.
func (b *builder) catchUpPass(ctx context.Context) (int64, error) {
	var read int64
	var mu sync.Mutex // fn is called from one goroutine; Progress may read concurrently
	err := b.opts.Stream.Read(ctx, b.gen.Position, func(ctx context.Context, sb StreamBatch) error {
		if len(sb.Position) == 0 {
			return errors.New("the stream gave a batch without a position")
		}
		pos, at, n := sb.Position, sb.Time, sb.Read
		save := func(ctx context.Context, tx pgx.Tx) error {
			return b.env.Store.Generations.Advance(ctx, tx, b.gen.Key, pos, nullTime(at), n)
		}
		var err error
		if len(sb.Events)+len(sb.Rejects) > 0 {
			err = b.feed.Process(ctx, Batch{Events: sb.Events, Rejects: sb.Rejects, Source: "rebuild:" + b.gen.Key, BeforeCommit: save})
		} else {
			err = pgx.BeginFunc(ctx, b.env.Pool, func(tx pgx.Tx) error { return save(ctx, tx) })
		}
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		read += n
		b.phaseRead += n
		b.res.Events += n
		b.gen.Position, b.gen.PositionTime = pos, at
		b.report(false, "")
		return nil
	})
	if err != nil {
		return read, fmt.Errorf("catch-up: %w", err)
	}
	return read, nil
}

// nullTime returns nil for the zero time, for a NULL timestamp.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
