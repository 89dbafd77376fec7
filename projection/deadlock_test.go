package projection_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// crossed is a projection whose batches update two shared rows in opposite
// orders: aggregate "a" row x then y, "b" row y then x. Its first batch of
// each waits, holding the first row, until the other holds its own: the two
// transactions then deadlock, for sure.
type crossed struct {
	mu      sync.Mutex
	holding map[string]chan struct{} // closed once the aggregate's first batch holds its first row
}

func (c *crossed) Name() string { return "crossed" }

func (c *crossed) Setup(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `CREATE TABLE shared_rows (k text PRIMARY KEY, n bigint NOT NULL);
INSERT INTO shared_rows VALUES ('x', 0), ('y', 0)`)
	return err
}

func (c *crossed) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `UPDATE shared_rows SET n = 0`)
	return err
}

func (c *crossed) ApplyBatch(ctx context.Context, tx *projection.Tx, events []aggregate.Event) error {
	agg := events[0].Aggregate
	first, second, other := "x", "y", "b"
	if agg == "b" {
		first, second, other = "y", "x", "a"
	}
	// PostgreSQL's deadlock check runs after deadlock_timeout; shorten it.
	if _, err := tx.Exec(ctx, `SET LOCAL deadlock_timeout = '50ms'`); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `UPDATE shared_rows SET n = n + 1 WHERE k = $1`, first); err != nil {
		return err
	}
	c.mu.Lock()
	mine, theirs := c.holding[agg], c.holding[other]
	c.mu.Unlock()
	select {
	case <-mine: // a retry: no waiting
	default:
		close(mine)
		select {
		case <-theirs:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("crossed: %s never held its row", other)
		}
	}
	// Queued: sent when the handler returns, the statement named in the log.
	tx.Queue(`UPDATE shared_rows SET n = n + 1 WHERE k = $1`, second)
	return nil
}

// TestDeadlockCounted: a deadlock between two batches is retried, counted
// in Counts.Deadlocks, and logged with the table and the statement.
func TestDeadlockCounted(t *testing.T) {
	t.Parallel()
	db := pgtest.NewMigrated(t)
	var logs bytes.Buffer
	var logMu sync.Mutex
	c := &crossed{holding: map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}}
	proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema,
		Logger: slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))}, c)
	require.NoError(t, err)
	require.NoError(t, proc.Setup(t.Context()))

	var wg sync.WaitGroup
	for _, agg := range []string{"a", "b"} {
		e, err := aggregate.New(agg, 1, "crossed", map[string]int{})
		require.NoError(t, err)
		wg.Go(func() {
			res, err := proc.Process(t.Context(), projection.Batch{Events: []aggregate.Event{e}})
			if !(t.Context().Err() == nil && err == nil && res[0].Outcome == projection.Applied) {
				t.Errorf("%s: %v %v", agg, res, err)
			}
		})
	}
	wg.Wait()

	require.Equal(t, int64(1), proc.Counts()["crossed"].Deadlocks, "one of the two transactions was chosen as the victim")
	var x, y int64
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT (SELECT n FROM shared_rows WHERE k = 'x'), (SELECT n FROM shared_rows WHERE k = 'y')`).Scan(&x, &y))
	require.Equal(t, [2]int64{2, 2}, [2]int64{x, y}, "both batches applied once, after the retry")
	logMu.Lock()
	out := logs.String()
	logMu.Unlock()
	require.Contains(t, out, `msg="deadlock, retrying batch"`)
	require.Contains(t, out, `table=shared_rows`)
	require.Contains(t, out, `statement="UPDATE shared_rows SET n = n + 1 WHERE k = $1"`)
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
