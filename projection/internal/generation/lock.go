package generation

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the build lock of a side-by-side rebuild (build.go): a
// session advisory lock per projection (Projection.BuildLock), held by one
// Build at a time across processes.

// lock takes the projection's build lock on b.conn. When another process
// holds it, it fails with Errors.BuildInProgress, or with Options.Wait
// waits for it and returns the generation that was being built.
func (b *builder) lock(ctx context.Context) (waitedFor int, err error) {
	st := b.env.Store
	// A build that was cancelled in this process a moment ago may still
	// hold the lock: its connection closed, its server session ending. So
	// try for a moment before deciding that another process holds it.
	bo := retry.Policy{Initial: 5 * time.Millisecond, Max: 640 * time.Millisecond, MaxElapsed: 1300 * time.Millisecond}.Start()
	for {
		ok, err := st.Locks.TrySession(ctx, b.conn, b.proj.BuildLock)
		if err != nil {
			return 0, fmt.Errorf("build lock: %w", err)
		}
		if ok {
			return 0, nil
		}
		again, err := bo.Wait(ctx)
		if err != nil {
			return 0, err
		}
		if !again {
			break
		}
	}
	var other store.Generation
	gens, err := b.proj.Gate.Generations(ctx)
	if err != nil {
		return 0, err
	}
	for _, g := range gens {
		if g.State == StateBuilding || g.State == StateCatchUp {
			other = g
		}
	}
	what := "a rebuild"
	if other.Generation != 0 {
		what = fmt.Sprintf("generation %d (code version %d, %s)", other.Generation, other.CodeVersion, cmp.Or(other.Phase, other.State))
	}
	if !b.opts.Wait {
		return 0, fmt.Errorf("%s is being built by another process: %w", what, b.env.Errors.BuildInProgress)
	}
	b.gen = other
	b.note(fmt.Sprintf("waiting: %s is being built by another process", what))
	if err := st.Locks.Session(ctx, b.conn, b.proj.BuildLock); err != nil {
		return 0, fmt.Errorf("build lock: %w", err)
	}
	return other.Generation, nil
}

// unlock releases the build lock; if it cannot, it closes the session,
// which releases it.
func (b *builder) unlock(ctx context.Context) { unlockBuild(ctx, b.env, b.conn, b.proj.BuildLock) }

// unlockBuild releases the build lock key held by conn's session; if it
// cannot, it closes the session, which releases it.
func unlockBuild(ctx context.Context, env *Env, conn *pgxpool.Conn, key int64) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if released, err := env.Store.Locks.Release(uctx, conn, key); err != nil || !released {
		_ = conn.Conn().Close(uctx)
	}
}

// HoldBuildLock takes the projection's build lock for its caller, if no
// Build holds it: ok is false when one does. release releases it (and the
// connection that holds it).
func HoldBuildLock(ctx context.Context, env *Env, proj Projection) (release func(), ok bool, err error) {
	conn, err := env.Pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	ok, err = env.Store.Locks.TrySession(ctx, conn, proj.BuildLock)
	if err != nil || !ok {
		conn.Release()
		return nil, false, err
	}
	return func() {
		unlockBuild(ctx, env, conn, proj.BuildLock)
		conn.Release()
	}, true, nil
}
