package migrations_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/migrations"
)

// embedded returns the embedded migration files of versions up to upTo (all
// of them when upTo is 0), and their versions and names in order.
func embedded(t *testing.T, upTo int) (fstest.MapFS, []int, []string) {
	t.Helper()
	entries, err := os.ReadDir("sql")
	require.NoError(t, err)
	fsys := fstest.MapFS{}
	var versions []int
	var names []string
	for _, e := range entries {
		var v int
		var rest string
		_, err := fmt.Sscanf(e.Name(), "%03d_%s", &v, &rest)
		require.NoError(t, err, e.Name())
		if upTo > 0 && v > upTo {
			continue
		}
		body, err := os.ReadFile("sql/" + e.Name())
		require.NoError(t, err)
		fsys[e.Name()] = &fstest.MapFile{Data: body}
		if name, ok := strings.CutSuffix(rest, ".up.sql"); ok {
			versions, names = append(versions, v), append(names, name)
		}
	}
	return fsys, versions, names
}

// allVersions returns the versions of every embedded migration, ascending.
func allVersions(t *testing.T) []int {
	_, vs, _ := embedded(t, 0)
	return vs
}

// reversed returns a reversed copy of vs.
func reversed(vs []int) []int {
	out := slices.Clone(vs)
	slices.Reverse(out)
	return out
}

var coreTables = []string{
	"applied", "applied_log", "checkpoints", "conflicts", "effects", "events", "generation_epoch", "generations", "operator_log", "owners", "parked",
	"quarantine", "rejected", "schema_migrations", "sources", "versions",
}

func TestMigrateAndRerun(t *testing.T) {
	t.Parallel()
	ctx, db, m := setup(t)

	res, err := m.Migrate(ctx)
	require.NoError(t, err)
	require.Equal(t, migrations.Up, res.Direction)
	require.False(t, res.DryRun)
	require.Equal(t, allVersions(t), res.Versions())
	require.Equal(t, "init", res.Steps[0].Name)
	require.Equal(t, "applied_in_versions", res.Steps[1].Name)
	require.Equal(t, "operations", res.Steps[2].Name)
	require.Positive(t, res.Steps[0].Duration)
	require.Equal(t, coreTables, tables(t, db.Pool, db.Schema))

	res, err = m.Migrate(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Steps, "a second run has nothing to do")
}

func TestMigrateCreatesAndQuotesSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	schema := otherSchema(t, db, `_Odd "Name"`)

	m := newMigrator(t, db.Pool, schema, false)
	require.Equal(t, schema, m.Schema())
	_, err := m.Migrate(ctx)
	require.NoError(t, err)
	require.Equal(t, coreTables, tables(t, db.Pool, schema))
	require.Empty(t, tables(t, db.Pool, db.Schema), "nothing lands in the pool's search_path schema")
}

func TestDryRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	schema := otherSchema(t, db, "_dry")

	res, err := newMigrator(t, db.Pool, schema, true).Migrate(ctx)
	require.NoError(t, err)
	require.True(t, res.DryRun)
	require.Equal(t, allVersions(t), res.Versions())
	require.Zero(t, res.Steps[0].Duration)
	var exists bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists))
	require.False(t, exists, "a dry run does not even create the schema")

	_, err = newMigrator(t, db.Pool, schema, false).Migrate(ctx)
	require.NoError(t, err)
	res, err = newMigrator(t, db.Pool, schema, true).Migrate(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Steps)

	res, err = newMigrator(t, db.Pool, schema, true).Rollback(ctx, len(allVersions(t)))
	require.NoError(t, err)
	require.Equal(t, reversed(allVersions(t)), res.Versions())
	require.Equal(t, coreTables, tables(t, db.Pool, schema), "a dry rollback drops nothing")
}

func TestStatus(t *testing.T) {
	t.Parallel()
	ctx, _, m := setup(t)

	st, err := m.Status(ctx)
	require.NoError(t, err)
	_, versions, names := embedded(t, 0)
	var want []migrations.Status
	for i, v := range versions {
		body, err := os.ReadFile(fmt.Sprintf("sql/%03d_%s.up.sql", v, names[i]))
		require.NoError(t, err)
		online := strings.HasPrefix(string(body), "-- inorder:online")
		want = append(want, migrations.Status{Version: v, Name: names[i], Online: online})
	}
	require.Equal(t, want, st)

	before := time.Now()
	_, err = m.Migrate(ctx)
	require.NoError(t, err)
	st, err = m.Status(ctx)
	require.NoError(t, err)
	require.Len(t, st, len(versions))
	for _, s := range st {
		require.True(t, s.Applied, s.Name)
	}
	require.False(t, st[0].Unknown)
	require.WithinDuration(t, before, st[0].AppliedAt, time.Minute)
}

func TestRollback(t *testing.T) {
	t.Parallel()
	ctx, db, m := migrated(t)

	_, err := m.Rollback(ctx, -1)
	require.Error(t, err)
	res, err := m.Rollback(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, res.Steps)

	res, err = m.Rollback(ctx, 99)
	require.NoError(t, err)
	require.Equal(t, migrations.Down, res.Direction)
	require.Equal(t, reversed(allVersions(t)), res.Versions())
	require.Equal(t, []string{"schema_migrations"}, tables(t, db.Pool, db.Schema))
	st, err := m.Status(ctx)
	require.NoError(t, err)
	require.False(t, st[0].Applied)

	res, err = m.Rollback(ctx, 1)
	require.NoError(t, err)
	require.Empty(t, res.Steps, "nothing left to roll back")

	res, err = m.Migrate(ctx)
	require.NoError(t, err)
	require.Equal(t, allVersions(t), res.Versions(), "rolled back migrations apply again")
}

func TestDatabaseAhead(t *testing.T) {
	t.Parallel()
	ctx, db, m := migrated(t)
	_, err := db.Pool.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES (999, 'from_the_future')")
	require.NoError(t, err)

	_, err = m.Migrate(ctx)
	require.ErrorIs(t, err, migrations.ErrUnknownVersion)
	require.ErrorContains(t, err, "999 (from_the_future)")
	_, err = m.Rollback(ctx, 1)
	require.ErrorIs(t, err, migrations.ErrUnknownVersion)

	st, err := m.Status(ctx)
	require.NoError(t, err)
	n := len(allVersions(t))
	require.Len(t, st, n+1)
	require.Equal(t, 999, st[n].Version)
	require.True(t, st[n].Unknown)
	require.True(t, st[n].Applied)
}

func TestConcurrentMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	// A schema that does not exist yet, so creating it races too.
	schema := otherSchema(t, db, "_concurrent")

	const pools, perPool = 3, 2
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		results = make(chan *migrations.Result, pools*perPool)
		errs    = make(chan error, pools*perPool)
	)
	for range pools {
		pool, err := pgxpool.New(ctx, db.URL)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		for range perPool {
			m := newMigrator(t, pool, schema, false)
			wg.Go(func() {
				<-start
				res, err := m.Migrate(ctx)
				if err != nil {
					errs <- err
					return
				}
				results <- res
			})
		}
	}
	close(start)
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var applied []int
	for res := range results {
		applied = append(applied, res.Versions()...)
	}
	slices.Sort(applied)
	require.Equal(t, allVersions(t), applied, "exactly one migrator applies each version")

	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&n))
	require.Equal(t, len(allVersions(t)), n)
}

func TestMigrateTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	schema := otherSchema(t, db, "_tx")
	m := newMigrator(t, db.Pool, schema, false)

	// Rolled back: nothing stays.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	res, err := m.MigrateTx(ctx, tx)
	require.NoError(t, err)
	require.Equal(t, allVersions(t), res.Versions())
	var path string
	require.NoError(t, tx.QueryRow(ctx, "SELECT current_setting('search_path')").Scan(&path))
	require.Equal(t, db.Schema, path, "MigrateTx restores the search_path")
	require.NoError(t, tx.Rollback(ctx))
	require.Empty(t, tables(t, db.Pool, schema))

	// Committed: applied, and a second run has nothing to do.
	tx, err = db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = m.MigrateTx(ctx, tx)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, coreTables, tables(t, db.Pool, schema))

	tx, err = db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	res, err = m.MigrateTx(ctx, tx)
	require.NoError(t, err)
	require.Empty(t, res.Steps)
}

func TestFailedStepRollsBackAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	fsys := fstest.MapFS{
		"001_one.up.sql":   {Data: []byte("-- inorder:online\nCREATE TABLE one (id int);")},
		"001_one.down.sql": {Data: []byte("DROP TABLE one;")},
		"002_two.up.sql":   {Data: []byte("-- inorder:online\nCREATE TABLE two (id int);\nSELECT 1/0;")},
		"002_two.down.sql": {Data: []byte("DROP TABLE two;")},
	}
	m, err := migrations.NewWithFS(db.Pool, &migrations.Options{Schema: db.Schema}, fsys)
	require.NoError(t, err)

	res, err := m.Migrate(ctx)
	require.ErrorContains(t, err, "apply 002_two")
	require.ErrorContains(t, err, "division by zero")
	require.Equal(t, []int{1}, res.Versions(), "the step before the failure stays applied")
	require.Equal(t, []string{"one", "schema_migrations"}, tables(t, db.Pool, db.Schema), "the failed step left nothing behind")

	st, err := m.Status(ctx)
	require.NoError(t, err)
	require.True(t, st[0].Applied)
	require.False(t, st[1].Applied)
}

// setup returns a test's context, its database (pgtest.New: an empty
// schema of its own) and a Migrator of the embedded migrations on it.
func setup(t *testing.T) (context.Context, *pgtest.DB, *migrations.Migrator) {
	t.Helper()
	db := pgtest.New(t)
	return context.Background(), db, newMigrator(t, db.Pool, db.Schema, false)
}

// upToVersion returns a Migrator on db of the embedded migrations up to version n.
func upToVersion(t *testing.T, db *pgtest.DB, n int) *migrations.Migrator {
	t.Helper()
	fsys, _, _ := embedded(t, n)
	m, err := migrations.NewWithFS(db.Pool, &migrations.Options{Schema: db.Schema}, fsys)
	require.NoError(t, err)
	return m
}

// migrated is setup with the migrations applied.
func migrated(t *testing.T) (context.Context, *pgtest.DB, *migrations.Migrator) {
	t.Helper()
	ctx, db, m := setup(t)
	_, err := m.Migrate(ctx)
	require.NoError(t, err)
	return ctx, db, m
}

// migratedTo returns a test's context and its database (pgtest.New) with
// the embedded migrations up to version n applied.
func migratedTo(t *testing.T, n int) (context.Context, *pgtest.DB) {
	t.Helper()
	ctx, db := context.Background(), pgtest.New(t)
	_, err := upToVersion(t, db, n).Migrate(ctx)
	require.NoError(t, err)
	return ctx, db
}

func newMigrator(t *testing.T, pool *pgxpool.Pool, schema string, dryRun bool) *migrations.Migrator {
	t.Helper()
	m, err := migrations.New(pool, &migrations.Options{Schema: schema, DryRun: dryRun, Logger: testLogger(t)})
	require.NoError(t, err)
	return m
}

// tables lists the tables in schema, sorted.
func tables(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		"SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1", schema)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	if names == nil {
		names = []string{}
	}
	return names
}

// otherSchema returns the name of a schema the test creates besides its
// pgtest one, db's schema name with suffix, and drops it when the test ends.
func otherSchema(t *testing.T, db *pgtest.DB, suffix string) string {
	t.Helper()
	schema := db.Schema + suffix
	t.Cleanup(func() {
		_, err := db.Pool.Exec(context.Background(), fmt.Sprintf("DROP SCHEMA IF EXISTS %s CASCADE", pgx.Identifier{schema}.Sanitize()))
		require.NoError(t, err)
	})
	return schema
}

// testLogger sends the migrator's log lines to the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestAppliedInVersions covers migration 002, which moves the applied log of
// recent versions into the version rows: rows of a version-1 schema keep
// their entries in applied (their log starts at their version), the
// applied_log view shows both, and the down migration moves the rows' logs
// back into applied.
func TestAppliedInVersions(t *testing.T) {
	t.Parallel()
	ctx, db := migratedTo(t, 1)
	hash := func(b byte) []byte { return slices.Repeat([]byte{b}, 16) }
	_, err := db.Pool.Exec(ctx, `INSERT INTO versions (projection, aggregate, version) VALUES ('p', 'a', 2);
INSERT INTO applied (projection, aggregate, version, event_id, hash) VALUES ('p', 'a', 1, 'a:1', '\x01'), ('p', 'a', 2, 'a:2', '\x02')`)
	require.NoError(t, err)

	m := upToVersion(t, db, 2)
	res, err := m.Migrate(ctx)
	require.NoError(t, err)
	require.Equal(t, []int{2}, res.Versions())
	var base int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT log_base FROM versions WHERE aggregate = 'a'`).Scan(&base))
	require.EqualValues(t, 2, base, "an existing row's entries are in applied: its log starts at its version")

	// Versions 3 and 4 in the row's log, 4 with an id of its own.
	_, err = db.Pool.Exec(ctx, `UPDATE versions SET version = 4, log_ids = '{NULL,"x:\"4\""}', log_hashes = $1 WHERE aggregate = 'a'`,
		append(hash(3), hash(4)...))
	require.NoError(t, err)
	entries := func(table string) map[int64]string {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `SELECT version, event_id || '/' || encode(hash, 'hex') FROM `+table+` WHERE aggregate = 'a'`)
		require.NoError(t, err)
		out := map[int64]string{}
		var v int64
		var s string
		_, err = pgx.ForEachRow(rows, []any{&v, &s}, func() error { out[v] = s; return nil })
		require.NoError(t, err)
		return out
	}
	want := map[int64]string{
		1: "a:1/01", 2: "a:2/02",
		3: "a:3/" + fmt.Sprintf("%x", hash(3)), 4: `x:"4"/` + fmt.Sprintf("%x", hash(4)),
	}
	require.Equal(t, want, entries("applied_log"))
	require.Len(t, entries("applied"), 2)

	res, err = m.Rollback(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []int{2}, res.Versions())
	require.Equal(t, want, entries("applied"), "the down migration moves the rows' logs into applied")
}

// TestOperationsMigration covers migration 003: checkpoints' EventStoreDB
// positions become the opaque position C:<commit>/P:<prepare> (zero-padded,
// so byte order is stream order) and back; conflicts gain an
// acknowledgement; rejected deliveries gain their raw bytes.
func TestOperationsMigration(t *testing.T) {
	t.Parallel()
	ctx, db := migratedTo(t, 2)
	_, err := db.Pool.Exec(ctx, `INSERT INTO checkpoints (name, commit_position, prepare_position)
VALUES ('a', 1234, 1230), ('b', 9000000000000000000, 7)`)
	require.NoError(t, err)

	m := upToVersion(t, db, 3)
	_, err = m.Migrate(ctx)
	require.NoError(t, err)
	positions := func() map[string]string {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `SELECT name, convert_from(position, 'UTF8') FROM checkpoints`)
		require.NoError(t, err)
		out := map[string]string{}
		var n, p string
		_, err = pgx.ForEachRow(rows, []any{&n, &p}, func() error { out[n] = p; return nil })
		require.NoError(t, err)
		return out
	}
	require.Equal(t, map[string]string{
		"a": "C:00000000000000001234/P:00000000000000001230",
		"b": "C:09000000000000000000/P:00000000000000000007",
	}, positions())
	_, err = db.Pool.Exec(ctx, `UPDATE conflicts SET acked_at = now(), ack_reason = 'x';
SELECT raw_event_id, raw_aggregate, raw_type FROM rejected`)
	require.NoError(t, err)

	_, err = db.Pool.Exec(ctx, `INSERT INTO checkpoints (name, position) VALUES ('other', '\x0102')`)
	require.NoError(t, err)
	res, err := m.Rollback(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []int{3}, res.Versions())
	rows, err := db.Pool.Query(ctx, `SELECT name, commit_position, prepare_position FROM checkpoints ORDER BY name`)
	require.NoError(t, err)
	type cp struct {
		name    string
		commit  int64
		prepare int64
	}
	var got []cp
	var c cp
	_, err = pgx.ForEachRow(rows, []any{&c.name, &c.commit, &c.prepare}, func() error { got = append(got, c); return nil })
	require.NoError(t, err)
	require.Equal(t, []cp{{"a", 1234, 1230}, {"b", 9000000000000000000, 7}, {"other", 0, 0}}, got)
}

// legacySession opens a connection named as inorder's command line named
// its connections before workers announced themselves, and runs a
// statement on schema's versions table, as an older release's worker does
// (on another table when schema is "", as a worker of another schema).
func legacySession(t *testing.T, db *pgtest.DB, schema string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	cfg := db.Pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = migrations.LegacyApplicationName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	table := pgx.Identifier{schema, "versions"}.Sanitize()
	if schema == "" {
		table = `"pg_catalog"."pg_class"`
	}
	_, err = conn.Exec(ctx, "SELECT count(*) FROM "+table)
	require.NoError(t, err)
	return conn
}

func TestOfflineMigrationRefusedWhileWorkersConnected(t *testing.T) {
	t.Parallel()
	ctx, db, m := setup(t)
	offline := pgtest.RollbackToOffline(t, m)

	workers, err := m.Workers(ctx)
	require.NoError(t, err)
	require.Empty(t, workers)

	// A worker of another schema is not one of ours.
	other, err := migrations.Announce(ctx, db.Pool, db.Schema+"_other", nil)
	require.NoError(t, err)
	defer other.Close()
	workers, err = m.Workers(ctx)
	require.NoError(t, err)
	require.Empty(t, workers, "another schema's worker")

	p, err := migrations.Announce(ctx, db.Pool, db.Schema, nil)
	require.NoError(t, err)
	defer p.Close()
	require.True(t, p.Held())
	workers, err = m.Workers(ctx)
	require.NoError(t, err)
	require.Len(t, workers, 1)
	require.True(t, workers[0].Announced)

	res, err := m.Migrate(ctx)
	require.ErrorIs(t, err, migrations.ErrWorkersConnected)
	var oe *migrations.OfflineError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, db.Schema, oe.Schema)
	require.Equal(t, offline, oe.Offline[0].Version)
	require.Len(t, oe.Workers, 1)
	require.ErrorContains(t, err, fmt.Sprintf("pid %d", workers[0].PID))
	require.ErrorContains(t, err, "--force")
	require.Empty(t, res.Steps, "nothing applied")
	st, err := m.Status(ctx)
	require.NoError(t, err)
	require.False(t, st[offline-1].Applied, "the offline migration was not applied")
	require.True(t, st[offline-2].Applied)

	// The same refusal inside a caller's transaction.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = m.MigrateTx(ctx, tx)
	require.ErrorIs(t, err, migrations.ErrWorkersConnected)
	require.NoError(t, tx.Rollback(ctx))

	// A dry run says what it would do.
	dry := newMigrator(t, db.Pool, db.Schema, true)
	res, err = dry.Migrate(ctx)
	require.NoError(t, err)
	require.Equal(t, offline, res.Steps[0].Version)
	require.False(t, res.Steps[0].Online)

	// An older release's worker counts too, recognised by its
	// application_name and a statement on the schema; one working on
	// another schema does not.
	p.Close()
	p.Close() // twice is fine
	legacy := legacySession(t, db, db.Schema)
	legacySession(t, db, "")
	workers, err = m.Workers(ctx)
	require.NoError(t, err)
	require.Len(t, workers, 1)
	require.False(t, workers[0].Announced)
	require.Equal(t, int(legacy.PgConn().PID()), workers[0].PID)
	_, err = m.Migrate(ctx)
	require.ErrorIs(t, err, migrations.ErrWorkersConnected)
	require.ErrorContains(t, err, "an older release's")

	// Forced, it applies everything.
	forced, err := migrations.New(db.Pool, &migrations.Options{Schema: db.Schema, Force: true, Logger: testLogger(t)})
	require.NoError(t, err)
	res, err = forced.Migrate(ctx)
	require.NoError(t, err)
	require.Equal(t, allVersions(t)[offline-1:], res.Versions())
}

func TestOnlineMigrationRunsWhileWorkersConnected(t *testing.T) {
	t.Parallel()
	ctx, db, m := migrated(t)
	st, err := m.Status(ctx)
	require.NoError(t, err)
	online := 0 // the online migrations after the newest offline one
	for i := len(st) - 1; i >= 0 && st[i].Online; i-- {
		online++
	}
	if online == 0 {
		t.Fatalf("the newest migration, %03d_%s, is offline: no online step to run under workers", st[len(st)-1].Version, st[len(st)-1].Name)
	}
	_, err = m.Rollback(ctx, online)
	require.NoError(t, err)
	p, err := migrations.Announce(ctx, db.Pool, db.Schema, nil)
	require.NoError(t, err)
	defer p.Close()
	legacySession(t, db, db.Schema)
	workers, err := m.Workers(ctx)
	require.NoError(t, err)
	require.Len(t, workers, 2)

	res, err := m.Migrate(ctx)
	require.NoError(t, err)
	require.Len(t, res.Steps, online)
	for _, s := range res.Steps {
		require.True(t, s.Online)
	}
}

func TestAnnouncementSurvivesALostConnection(t *testing.T) {
	t.Parallel()
	ctx, db, m := setup(t)
	p, err := migrations.Announce(ctx, db.Pool, db.Schema, testLogger(t))
	require.NoError(t, err)
	defer p.Close()
	workers, err := m.Workers(ctx)
	require.NoError(t, err)
	require.Len(t, workers, 1)
	var killed bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", workers[0].PID).Scan(&killed))
	require.True(t, killed)
	require.Eventually(t, func() bool {
		ws, err := m.Workers(ctx)
		return err == nil && len(ws) == 1 && ws[0].PID != workers[0].PID && ws[0].Announced
	}, 20*time.Second, 50*time.Millisecond, "the announcement comes back on a new connection")

	p.Close()
	require.Eventually(t, func() bool {
		ws, err := m.Workers(ctx)
		return err == nil && len(ws) == 0
	}, 10*time.Second, 20*time.Millisecond, "closed, the announcement is gone")
}

func TestOnlineStepWaitsBoundedForItsLock(t *testing.T) {
	t.Parallel()
	ctx, db, m := migrated(t)
	st, err := m.Status(ctx)
	require.NoError(t, err)
	last := st[len(st)-1]
	if !last.Online {
		t.Fatalf("the newest migration, %03d_%s, is offline", last.Version, last.Name)
	}
	// The two newest: the newest (owners) creates a table and needs no
	// lock on the others; the one before it adds a column to effects.
	_, err = m.Rollback(ctx, 2)
	require.NoError(t, err)

	// A long transaction holds a lock on every table of the schema; the
	// online step gives up within its bounded waits instead of queueing
	// writers behind it for as long as that transaction lasts.
	holder, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	rows, err := holder.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1 AND tablename <> 'schema_migrations'", db.Schema)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, n := range names {
		_, err := holder.Exec(ctx, "LOCK TABLE "+pgx.Identifier{db.Schema, n}.Sanitize()+" IN ACCESS SHARE MODE")
		require.NoError(t, err)
	}
	short, err := migrations.New(db.Pool, &migrations.Options{Schema: db.Schema, LockTimeout: 50 * time.Millisecond, Logger: testLogger(t)})
	require.NoError(t, err)
	stepCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = short.Migrate(stepCtx)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "55P03", pgErr.Code, "lock_not_available after the retries")

	require.NoError(t, holder.Rollback(ctx))
	res, err := short.Migrate(ctx)
	require.NoError(t, err)
	require.Equal(t, []int{last.Version - 1, last.Version}, res.Versions())
}

func TestNewerOnlineMigrationsTolerated(t *testing.T) {
	t.Parallel()
	ctx, db, m := migrated(t)

	// Each applied migration's directive is recorded.
	rows, err := db.Pool.Query(ctx, "SELECT online FROM schema_migrations ORDER BY version")
	require.NoError(t, err)
	recorded, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	require.NoError(t, err)
	st, err := m.Status(ctx)
	require.NoError(t, err)
	for i, s := range st {
		require.Equal(t, s.Online, recorded[i], "%03d_%s", s.Version, s.Name)
	}

	// A newer release's online migration: this binary works beside it.
	n := len(st)
	_, err = db.Pool.Exec(ctx, "INSERT INTO schema_migrations (version, name, online) VALUES ($1, 'newer_column', true)", n+1)
	require.NoError(t, err)
	res, err := m.Migrate(ctx)
	require.NoError(t, err)
	require.Empty(t, res.Steps)
	st, err = m.Status(ctx)
	require.NoError(t, err)
	require.Len(t, st, n+1)
	require.True(t, st[n].Unknown)
	require.True(t, st[n].Online)
	_, err = m.Rollback(ctx, 1)
	require.ErrorIs(t, err, migrations.ErrUnknownVersion, "no rollback under a newer release's migration")

	// One that is offline, or not recorded, is refused.
	_, err = db.Pool.Exec(ctx, "INSERT INTO schema_migrations (version, name, online) VALUES ($1, 'newer_rewrite', false)", n+2)
	require.NoError(t, err)
	_, err = m.Migrate(ctx)
	require.ErrorIs(t, err, migrations.ErrUnknownVersion)
	require.ErrorContains(t, err, "newer_rewrite")
}

func TestTrackingTableGainsOnline(t *testing.T) {
	t.Parallel()
	ctx, db, m := migrated(t)
	// As an older release left it: no online column.
	_, err := db.Pool.Exec(ctx, "ALTER TABLE schema_migrations DROP COLUMN online")
	require.NoError(t, err)
	st, err := m.Status(ctx)
	require.NoError(t, err, "Status reads a table without the column")
	require.True(t, st[len(st)-1].Applied)
	_, err = m.Rollback(ctx, 1)
	require.NoError(t, err)
	res, err := m.Migrate(ctx)
	require.NoError(t, err)
	require.Len(t, res.Steps, 1)
	var online *bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT online FROM schema_migrations WHERE version = $1", res.Steps[0].Version).Scan(&online))
	require.NotNil(t, online)
	require.Equal(t, res.Steps[0].Online, *online)
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT online FROM schema_migrations WHERE version = 1").Scan(&online))
	require.Nil(t, online, "not recorded by the release that applied it")
}

// concurrentIndexFS is a schema of two migrations: a table, then a unique
// index on it built CONCURRENTLY, outside a transaction.
func concurrentIndexFS() fstest.MapFS {
	return fstest.MapFS{
		"001_t.up.sql":     {Data: []byte("-- inorder:online\nCREATE TABLE t (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int NOT NULL);")},
		"001_t.down.sql":   {Data: []byte("DROP TABLE t;")},
		"002_t_v.up.sql":   {Data: []byte("-- inorder:online — built without blocking t's writers\n-- inorder:no-transaction\nCREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v);")},
		"002_t_v.down.sql": {Data: []byte("DROP INDEX CONCURRENTLY IF EXISTS t_v;")},
	}
}

// indexState returns whether index t_v exists in schema and whether it is
// valid.
func indexState(t *testing.T, db *pgtest.DB) (exists, valid bool) {
	t.Helper()
	err := db.Pool.QueryRow(context.Background(), `SELECT i.indisvalid FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = 't_v'`, db.Schema).Scan(&valid)
	if err == pgx.ErrNoRows {
		return false, false
	}
	require.NoError(t, err)
	return true, valid
}

// TestIndexBuiltConcurrently covers a no-transaction migration: its CREATE
// INDEX CONCURRENTLY lets new writers of the table through while it waits
// for an open one (a build in a transaction would queue them behind its
// SHARE lock), an invalid index a failed build left is dropped and built
// again, a crash between the build and its record is harmless, Rollback
// drops it outside a transaction too, and MigrateTx builds it in the
// caller's transaction.
func TestIndexBuiltConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	m, err := migrations.NewWithFS(db.Pool, &migrations.Options{Schema: db.Schema, Logger: testLogger(t)}, concurrentIndexFS())
	require.NoError(t, err)
	first, err := migrations.NewWithFS(db.Pool, &migrations.Options{Schema: db.Schema, Logger: testLogger(t)}, fstest.MapFS{
		"001_t.up.sql": concurrentIndexFS()["001_t.up.sql"], "001_t.down.sql": concurrentIndexFS()["001_t.down.sql"],
	})
	require.NoError(t, err)
	_, err = first.Migrate(ctx)
	require.NoError(t, err)

	// A failed build (duplicates in a unique index) leaves an invalid
	// index and no record.
	_, err = db.Pool.Exec(ctx, "INSERT INTO t (v) VALUES (1), (1)")
	require.NoError(t, err)
	_, err = m.Migrate(ctx)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23505", pgErr.Code, "unique_violation")
	exists, valid := indexState(t, db)
	require.True(t, exists)
	require.False(t, valid, "PostgreSQL keeps the failed build's index, invalid")
	st, err := m.Status(ctx)
	require.NoError(t, err)
	require.False(t, st[1].Applied)
	var searchPath string
	require.NoError(t, db.Pool.QueryRow(ctx, "SHOW search_path").Scan(&searchPath))

	// Without the duplicates, and while a writer's transaction is open,
	// the build waits for that writer but not for the ones after it.
	_, err = db.Pool.Exec(ctx, "DELETE FROM t")
	require.NoError(t, err)
	open, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = open.Rollback(ctx) }()
	_, err = open.Exec(ctx, "INSERT INTO t (v) VALUES (0)")
	require.NoError(t, err)
	migrated := make(chan error, 1)
	go func() {
		_, err := m.Migrate(ctx)
		migrated <- err
	}()
	// The build is under way once it waits on the open transaction.
	require.Eventually(t, func() bool {
		var waiting bool
		err := db.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query LIKE '%INDEX CONCURRENTLY%' AND wait_event_type = 'Lock' AND pid <> pg_backend_pid())").Scan(&waiting)
		return err == nil && waiting
	}, 20*time.Second, 20*time.Millisecond, "the build waits for the open writer")
	for v := 1; v <= 20; v++ {
		writeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := db.Pool.Exec(writeCtx, "INSERT INTO t (v) VALUES ($1)", v)
		cancel()
		require.NoError(t, err, "a new writer goes through while the index is built")
	}
	select {
	case err := <-migrated:
		t.Fatalf("the build finished before the open writer did: %v", err)
	default:
	}
	require.NoError(t, open.Commit(ctx))
	require.NoError(t, <-migrated)
	exists, valid = indexState(t, db)
	require.True(t, exists)
	require.True(t, valid, "the invalid index was dropped and built again")
	st, err = m.Status(ctx)
	require.NoError(t, err)
	require.True(t, st[1].Applied)
	require.True(t, st[1].Online)
	_, err = db.Pool.Exec(ctx, "INSERT INTO t (v) VALUES (1)")
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23505", pgErr.Code, "the index is in force")
	var after string
	require.NoError(t, db.Pool.QueryRow(ctx, "SHOW search_path").Scan(&after))
	require.Equal(t, searchPath, after, "the pool's connections keep their search_path")

	// A crash after the build, before its record: the next run records it.
	_, err = db.Pool.Exec(ctx, "DELETE FROM schema_migrations WHERE version = 2")
	require.NoError(t, err)
	res, err := m.Migrate(ctx)
	require.NoError(t, err)
	require.Equal(t, []int{2}, res.Versions())

	// Rollback drops it, outside a transaction too.
	res, err = m.Rollback(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []int{2}, res.Versions())
	exists, _ = indexState(t, db)
	require.False(t, exists)

	// MigrateTx builds it in the caller's transaction (no CONCURRENTLY
	// there), and a rollback of that transaction leaves nothing.
	for _, commit := range []bool{false, true} {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		res, err := m.MigrateTx(ctx, tx)
		require.NoError(t, err)
		require.Equal(t, []int{2}, res.Versions())
		if commit {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
		exists, valid = indexState(t, db)
		require.Equal(t, commit, exists)
		require.Equal(t, commit, valid)
	}
}
