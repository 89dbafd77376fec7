package generation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds side-by-side rebuilds: Build and the order of the steps
// of the generation it builds — the build lock (lock.go), create or resume
// it, replay (replay.go, finalize.go), catch up (catchup.go), hold
// (hold.go), verify and switch (switch.go). builder.go has the state of
// one Build, progress.go its phases and progress reports. inplace.go has
// the in-place mode.

// Build rebuilds the projection side by side (projection.Processor.Build
// without BuildOptions.InPlace, which documents it). opts has its defaults
// applied (package projection applies them), and the processor's
// generations have been loaded once (its first generation recorded). Its errors name the projection and the
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

	gens, err := b.proj.Gate.Generations(ctx)
	if err != nil {
		return err
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
