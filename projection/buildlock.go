package projection

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/inorder/inorder/internal/retry"
)

// This file holds the build lock of a side-by-side rebuild (build.go): a
// session advisory lock per projection, held by one Build at a time across
// processes.

// lockKey is the key of the session advisory lock a Build holds.
func (b *builder) lockKey() int64 {
	return advisoryKey64("inorder.build\x00" + b.p.cfg.Schema + "\x00" + b.r.name)
}

// lock takes the projection's build lock on b.conn. When another process
// holds it, it fails with ErrBuildInProgress, or with BuildOptions.Wait
// waits for it and returns the generation that was being built.
func (b *builder) lock(ctx context.Context) (waitedFor int, err error) {
	// A build that was cancelled in this process a moment ago may still
	// hold the lock: its connection closed, its server session ending. So
	// try for a moment before deciding that another process holds it.
	bo := retry.Policy{Initial: 5 * time.Millisecond, Max: 640 * time.Millisecond, MaxElapsed: 1300 * time.Millisecond}.Start()
	for {
		ok, err := b.p.store.Locks.TrySession(ctx, b.conn, b.lockKey())
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
	var other Generation
	gens, err := b.p.Generations(ctx, b.r.name)
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
		return 0, fmt.Errorf("%s is being built by another process: %w", what, ErrBuildInProgress)
	}
	b.gen = other
	b.note(fmt.Sprintf("waiting: %s is being built by another process", what))
	if err := b.p.store.Locks.Session(ctx, b.conn, b.lockKey()); err != nil {
		return 0, fmt.Errorf("build lock: %w", err)
	}
	return other.Generation, nil
}

// unlock releases the build lock; if it cannot, it closes the session,
// which releases it.
func (b *builder) unlock(ctx context.Context) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if released, err := b.p.store.Locks.Release(uctx, b.conn, b.lockKey()); err != nil || !released {
		_ = b.conn.Conn().Close(uctx)
	}
}
