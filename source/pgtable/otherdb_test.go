package pgtable_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/pglocal"
	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/migrations"
	"github.com/inorder/inorder/source/pgtable"
	"github.com/inorder/inorder/source/sourcetest"
)

// otherDBSubject is inorder's own events table in a database of its own —
// a private cluster the test restarts (pg_ctl restart -m immediate: every
// server process killed, crash recovery) — while the processor and its
// checkpoints stay in the test database.
func otherDBSubject() sourcetest.Subject {
	return sourcetest.Subject{Name: "pgtable-otherdb", New: newOtherDBCase, Consumer: consumer(false),
		Features: sourcetest.Features{Only: []string{"Restart"}}}
}

func newOtherDBCase(t *testing.T) *sourcetest.Case {
	ctx := t.Context()
	if _, err := pglocal.FindBinDir(); err != nil {
		t.Skipf("needs the PostgreSQL server binaries for a cluster of its own: %v", err)
	}
	parent, err := os.MkdirTemp("", "inorder-pgtable-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(parent, 0o755)
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	c, err := pglocal.Start(ctx, pglocal.Options{Dir: filepath.Join(parent, "pg")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	pool, err := pgxpool.New(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	m, err := migrations.New(pool, &migrations.Options{Schema: "inorder"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	w := pgtable.NewWriter("inorder", &aggregate.Limits{MaxPayload: -1})
	return &sourcetest.Case{
		Env: map[string]string{"url": c.URL(), "schema": "inorder"},
		Publish: func(ctx context.Context, msgs []sourcetest.Message) error {
			for _, msg := range msgs {
				// Right after a restart the pool's connections are gone:
				// retry (an append that went through is not appended again).
				for attempt := 0; ; attempt++ {
					err := w.Append(ctx, pool, event(msg))
					if err == nil || attempt == 50 {
						if err != nil {
							return err
						}
						break
					}
					if err := retry.Sleep(ctx, 100*time.Millisecond); err != nil {
						return err
					}
				}
			}
			return nil
		},
		Restart: func(ctx context.Context) error { return c.Restart(ctx, "immediate") },
	}
}
