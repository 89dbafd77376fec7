package pgtest_test

import (
	"context"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/pgtest"
)

func TestBaseURL(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgtest.BaseURL(t))
	require.NoError(t, err)
	require.Equal(t, "/"+pgtest.DatabaseName, u.Path)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u.String())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var db string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()").Scan(&db))
	require.Equal(t, pgtest.DatabaseName, db)
}

func TestNewSetsSearchPathOnEveryConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	require.True(t, strings.HasPrefix(db.Schema, "t_"), db.Schema)
	require.Equal(t, int32(pgtest.MaxConns), db.Pool.Config().MaxConns)

	// Hold several connections at once so that they are distinct.
	var wg sync.WaitGroup
	paths := make(chan string, 5)
	for range 5 {
		wg.Go(func() {
			tx, err := db.Pool.Begin(ctx)
			if !assertNoError(t, err) {
				return
			}
			defer tx.Rollback(ctx) //nolint:errcheck
			var path string
			if assertNoError(t, tx.QueryRow(ctx, "SELECT current_setting('search_path') FROM pg_sleep(0.05)").Scan(&path)) {
				paths <- path
			}
		})
	}
	wg.Wait()
	close(paths)
	n := 0
	for p := range paths {
		require.Equal(t, db.Schema, p)
		n++
	}
	require.Equal(t, 5, n)

	// Unqualified names land in the schema.
	_, err := db.Pool.Exec(ctx, "CREATE TABLE widgets (id int PRIMARY KEY)")
	require.NoError(t, err)
	var found bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL",
		pgx.Identifier{db.Schema, "widgets"}.Sanitize()).Scan(&found))
	require.True(t, found)
}

func TestURLSetsSearchPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	require.Contains(t, db.URL, "options=-c%20search_path%3D"+db.Schema)

	conn, err := pgx.Connect(ctx, db.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var schema string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_schema()").Scan(&schema))
	require.Equal(t, db.Schema, schema)

	// libpq parses URLs differently from pgx ('+' is not a space there).
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Skip("no psql on PATH")
	}
	out, err := exec.CommandContext(ctx, psql, db.URL, "-XAtc", "SELECT current_schema()").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Equal(t, db.Schema, strings.TrimSpace(string(out)))
}

func TestSchemasAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgtest.New(t), pgtest.New(t)
	require.NotEqual(t, a.Schema, b.Schema)
	for _, db := range []*pgtest.DB{a, b} {
		_, err := db.Pool.Exec(ctx, "CREATE TABLE items (name text)")
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, "INSERT INTO items VALUES ($1)", db.Schema)
		require.NoError(t, err)
	}
	for _, db := range []*pgtest.DB{a, b} {
		var names []string
		rows, err := db.Pool.Query(ctx, "SELECT name FROM items")
		require.NoError(t, err)
		names, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Equal(t, []string{db.Schema}, names)
	}
}

func TestSchemaDroppedAfterTest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var schema string
	t.Run("inner", func(t *testing.T) {
		db := pgtest.New(t)
		schema = db.Schema
		_, err := db.Pool.Exec(ctx, "CREATE TABLE t (id int)")
		require.NoError(t, err)
	})

	conn, err := pgx.Connect(ctx, pgtest.BaseURL(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var exists bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
	require.False(t, exists, "schema %s survived its test", schema)
}

func TestNewMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewMigrated(t)
	rows, err := db.Pool.Query(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1", db.Schema)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{
		"applied", "applied_log", "checkpoints", "conflicts", "effects", "events", "generation_epoch", "generations", "operator_log", "owners", "parked",
		"quarantine", "rejected", "schema_migrations", "sources", "versions",
	}, tables)

	_, err = db.Pool.Exec(ctx, "INSERT INTO versions (projection, aggregate) VALUES ('p', 'a')")
	require.NoError(t, err)
}

// assertNoError reports err from any goroutine without stopping it.
func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}
