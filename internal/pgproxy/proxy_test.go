package pgproxy_test

import (
	"context"
	"strings"
	"testing"

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
