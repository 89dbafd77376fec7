package pgproxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/pgproxy"
	"github.com/inorder/inorder/internal/pgtest"
)

// setup returns a test schema and a proxy to its server, closed when the
// test ends, with the proxied URL.
func setup(t *testing.T) (*pgtest.DB, *pgproxy.Proxy, string) {
	t.Helper()
	db := pgtest.New(t)
	p, u, err := pgproxy.ListenFor(db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return db, p, u
}

func connect(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(t.Context(), u)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// TestForward: queries of every protocol shape go through unchanged —
// simple, extended with arguments, a pipeline, a large result, COPY.
func TestForward(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, p, u := setup(t)
	c := connect(t, u)

	var n int
	require.NoError(t, c.QueryRow(ctx, `SELECT $1::int + 1`, 41).Scan(&n))
	require.Equal(t, 42, n)
	var big string
	require.NoError(t, c.QueryRow(ctx, `SELECT repeat('x', 3000000)`).Scan(&big))
	require.Len(t, big, 3_000_000)
	_, err := c.Exec(ctx, `CREATE TABLE t (id int, s text)`)
	require.NoError(t, err)
	b := &pgx.Batch{}
	for i := range 100 {
		b.Queue(`INSERT INTO t VALUES ($1, $2)`, i, strings.Repeat("y", i*100))
	}
	require.NoError(t, c.SendBatch(ctx, b).Close())
	rows := [][]any{}
	for i := range 1000 {
		rows = append(rows, []any{1000 + i, "copy"})
	}
	copied, err := c.CopyFrom(ctx, pgx.Identifier{"t"}, []string{"id", "s"}, pgx.CopyFromRows(rows))
	require.NoError(t, err)
	require.EqualValues(t, 1000, copied)
	require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n))
	require.Equal(t, 1100, n)
	require.Equal(t, pgproxy.Stats{Conns: 1}, p.Stats())

}

// TestCut: Cut(InTransaction) closes the connection inside a transaction
// and spares the idle one; the server rolls the cut transaction back.
func TestCut(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, p, u := setup(t)
	_, err := db.Pool.Exec(ctx, `CREATE TABLE t (id int)`)
	require.NoError(t, err)
	busy, idle := connect(t, u), connect(t, u)

	tx, err := busy.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO t VALUES (1)`)
	require.NoError(t, err)
	require.Equal(t, 1, p.Cut(pgproxy.InTransaction, -1))
	require.Error(t, tx.Commit(ctx), "the cut connection cannot commit")
	require.True(t, busy.IsClosed())

	var n int
	require.NoError(t, idle.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n))
	require.Zero(t, n, "the cut transaction did not commit")
	require.Zero(t, p.Cut(pgproxy.InTransaction, -1), "nothing else is in a transaction")
	require.Equal(t, 1, p.Cut(pgproxy.All, -1))
	require.Error(t, idle.Ping(ctx))
	st := p.Stats()
	require.Equal(t, pgproxy.Stats{Conns: 2, Cancels: st.Cancels, Cuts: 2}, st, "pgx may send cancel requests for the broken connection")
}

// TestCutAtCommit: the armed COMMIT reaches the server, which commits, and
// the client gets an error instead of the answer — the ambiguous commit. A
// COMMIT of a failed transaction is not cut and keeps the proxy armed.
func TestCutAtCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, p, u := setup(t)
	_, err := db.Pool.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`)
	require.NoError(t, err)
	p.CutAtCommit(1)

	c := connect(t, u)
	tx, err := c.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO t VALUES (1)`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO t VALUES (1)`) // fails: the transaction is aborted
	require.Error(t, err)
	require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxCommitRollback, "a failed transaction's COMMIT is answered")
	require.Equal(t, 1, p.ArmedCommitCuts(), "still armed")

	tx, err = c.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO t VALUES (2)`)
	require.NoError(t, err)
	err = tx.Commit(ctx)
	require.Error(t, err, "the client never hears that it committed")
	require.True(t, c.IsClosed())
	var ids []int
	rows, err := db.Pool.Query(ctx, `SELECT id FROM t`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{2}, ids, "yet it committed")
	st := p.Stats()
	require.Equal(t, pgproxy.Stats{Conns: 1, Cancels: st.Cancels, CommitCuts: 1}, st)
	require.Zero(t, p.ArmedCommitCuts())
}

// TestHoldAtCommit: the armed COMMIT reaches the server, which commits,
// and the answer waits in the proxy: released, the client's Commit returns
// nil; when the client gives up instead (its context cancelled), it never
// hears that its transaction committed, yet it did. A COMMIT of a failed
// transaction is answered at once and leaves the hold armed.
func TestHoldAtCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, p, u := setup(t)
	_, err := db.Pool.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`)
	require.NoError(t, err)
	ids := func() []int {
		rows, err := db.Pool.Query(ctx, `SELECT id FROM t ORDER BY id`)
		require.NoError(t, err)
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
		require.NoError(t, err)
		return ids
	}
	// commit runs tx.Commit(cctx) in the background.
	commit := func(cctx context.Context, c *pgx.Conn, id int) <-chan error {
		tx, err := c.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO t VALUES ($1)`, id)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { done <- tx.Commit(cctx) }()
		return done
	}
	wait := func(ch <-chan struct{}, what string) {
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
		}
	}

	// Released: the client hears the answer late.
	h := p.HoldAtCommit()
	c := connect(t, u)
	done := commit(ctx, c, 1)
	wait(h.Held(), "the held answer")
	require.Equal(t, []int{1}, ids(), "committed before the client heard of it")
	select {
	case err := <-done:
		t.Fatalf("Commit returned %v while its answer was held", err)
	default:
	}
	h.Release()
	h.Release() // twice is harmless
	require.NoError(t, <-done)
	var n int
	require.NoError(t, c.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n), "the connection goes on")
	require.Equal(t, 1, n)

	// A failed transaction's COMMIT is answered; the hold stays armed for
	// the next one.
	h = p.HoldAtCommit()
	tx, err := c.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO t VALUES (1)`) // fails: the transaction is aborted
	require.Error(t, err)
	require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxCommitRollback)
	select {
	case <-h.Held():
		t.Fatal("a failed transaction's answer was held")
	default:
	}

	// The client gives up while the answer is held.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done = commit(cctx, c, 2)
	wait(h.Held(), "the second held answer")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled, "the client gave up without an answer")
	require.True(t, c.IsClosed())
	require.Equal(t, []int{1, 2}, ids(), "yet it committed")
	st := p.Stats()
	require.Equal(t, pgproxy.Stats{Conns: 1, Cancels: st.Cancels, CommitHolds: 2}, st)
}
