package projection_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// TestInlineUpsert: InlineUpsert's statement writes the read model's
// columns (inserted only, replaced, or updated by an expression of the row
// without an alias), moves the row's version and log on the inline path,
// leaves a row its Condition refuses alone, and writes the plain upsert
// outside it; Queue refuses values that do not fit the columns and keys
// that are not the inline runs'.
func TestInlineUpsert(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, `CREATE TABLE up (id text PRIMARY KEY, name text NOT NULL, n bigint NOT NULL,
  version bigint NOT NULL, changed boolean NOT NULL DEFAULT false, log bytea NOT NULL DEFAULT '')`)
	require.NoError(t, err)
	up := projection.InlineUpsert{
		Table: projection.InlineTable{Table: pgx.Identifier{db.Schema, "up"}, Key: "id", Version: "version", Log: "log"},
		Columns: []projection.InlineColumn{
			{Name: "name", Type: "text", InsertOnly: true},
			{Name: "n", Type: "bigint", Update: "up.n + EXCLUDED.n"},
		},
		Set: []string{"changed = true"},
	}
	ev := func(agg string, v int64) aggregate.Event {
		e, err := aggregate.New(agg, v, "x", map[string]int64{"v": v})
		require.NoError(t, err)
		return e
	}
	type row struct {
		Name    string
		N       int64
		Version int64
		Changed bool
		Log     int
	}
	read := func(id string) row {
		var r row
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT name, n, version, changed, octet_length(log) FROM up WHERE id = $1`, id).
			Scan(&r.Name, &r.N, &r.Version, &r.Changed, &r.Log))
		return r
	}
	// write runs f on a Tx given the inline runs of events (none: the
	// plain path), and sends what it queued.
	write := func(events []aggregate.Event, f func(tx *projection.Tx) error) error {
		return pgx.BeginFunc(ctx, db.Pool, func(ptx pgx.Tx) error {
			tx := projection.NewTx(ptx)
			if events != nil {
				projection.SetInlineRuns(tx, events)
			}
			if err := f(tx); err != nil {
				return err
			}
			return tx.Flush(ctx)
		})
	}

	require.NoError(t, write([]aggregate.Event{ev("a", 1), ev("a", 2), ev("b", 1)}, func(tx *projection.Tx) error {
		return up.Queue(tx, []string{"a", "b"}, []int64{2, 1}, []string{"A", "B"}, []int64{2, 1})
	}))
	require.Equal(t, row{Name: "A", N: 2, Version: 2, Log: 16}, read("a"))
	require.Equal(t, row{Name: "B", N: 1, Version: 1, Log: 8}, read("b"))

	require.NoError(t, write([]aggregate.Event{ev("a", 3)}, func(tx *projection.Tx) error {
		return up.Queue(tx, []string{"a"}, []int64{3}, []string{"renamed"}, []int64{5})
	}))
	require.Equal(t, row{Name: "A", N: 7, Version: 3, Changed: true, Log: 24}, read("a"), "name is insert-only, n adds up")

	// The run of v3 again: the row is not at v2, Condition refuses it.
	require.NoError(t, write([]aggregate.Event{ev("a", 3)}, func(tx *projection.Tx) error {
		return up.Queue(tx, []string{"a"}, []int64{3}, []string{"A"}, []int64{100})
	}))
	require.Equal(t, row{Name: "A", N: 7, Version: 3, Changed: true, Log: 24}, read("a"))

	// Outside the inline path: the plain upsert, the log left as it is.
	require.NoError(t, write(nil, func(tx *projection.Tx) error {
		return up.Queue(tx, []string{"b", "c"}, []int64{9, 1}, []string{"x", "C"}, []int64{1, 1})
	}))
	require.Equal(t, row{Name: "B", N: 2, Version: 9, Changed: true, Log: 8}, read("b"))
	require.Equal(t, row{Name: "C", N: 1, Version: 1, Log: 0}, read("c"))
	require.NotContains(t, up.SQL(false), `"log"`)
	require.NotContains(t, up.SQL(false), "WHERE")

	for name, c := range map[string]struct {
		events []aggregate.Event
		keys   []string
		vers   []int64
		values []any
		want   string
	}{
		"values":     {nil, []string{"a"}, []int64{1}, []any{[]string{"A"}}, "1 values for 2 columns"},
		"versions":   {nil, []string{"a"}, []int64{1, 2}, []any{[]string{"A"}, []int64{1}}, "2 versions for 1 keys"},
		"short":      {nil, []string{"a", "b"}, []int64{1, 1}, []any{[]string{"A"}, []int64{1, 1}}, "column name: want a slice of 2 values, got []string"},
		"not slice":  {nil, []string{"a"}, []int64{1}, []any{"A", []int64{1}}, "column name: want a slice of 1 values, got string"},
		"runs":       {[]aggregate.Event{ev("a", 4), ev("b", 10)}, []string{"a"}, []int64{4}, []any{[]string{"A"}, []int64{1}}, "1 rows to write, 2 inline runs"},
		"other keys": {[]aggregate.Event{ev("a", 4)}, []string{"b"}, []int64{4}, []any{[]string{"A"}, []int64{1}}, "row b v4 written with the inline run of a v4"},
		"version":    {[]aggregate.Event{ev("a", 4)}, []string{"a"}, []int64{5}, []any{[]string{"A"}, []int64{1}}, "row a v5 written with the inline run of a v4"},
	} {
		err := write(c.events, func(tx *projection.Tx) error {
			err := up.Queue(tx, c.keys, c.vers, c.values...)
			if b := projection.TxBatch(tx); b.Len() != 0 {
				t.Errorf("%s: %d statements queued with an error", name, b.Len())
			}
			return err
		})
		require.ErrorContains(t, err, c.want, name)
	}
}
