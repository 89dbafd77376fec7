package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/internal/pglocal"
	"github.com/inorder/inorder/migrations"
)

const (
	// DatabaseName is the database every test schema is created in.
	DatabaseName = "inorder_test"

	// MaxConns is the size of each DB.Pool.
	MaxConns = 16

	envURL       = "TEST_DATABASE_URL"
	envProbeAddr = "INORDER_PGTEST_PROBE_ADDR"
	defaultProbe = "127.0.0.1:5432"
	probeTimeout = 2 * time.Second
	setupTimeout = 3 * time.Minute
	opTimeout    = time.Minute
)

// base is the server choice, made once per test binary.
var base struct {
	once   sync.Once
	url    string
	source string
	err    error
}

// DB is one test's private schema.
type DB struct {
	// Pool connects to the test database with search_path set to Schema
	// on every connection. It holds up to MaxConns connections and is
	// closed when the test ends.
	Pool *pgxpool.Pool
	// Schema is the test's fresh schema, dropped with CASCADE when the
	// test ends.
	Schema string
	// URL is a connection URL whose connections also get search_path =
	// Schema, for subprocesses.
	URL string
}

// BaseURL returns the URL of the inorder_test database on the chosen server
// (see the package documentation), choosing it on first use. Connections
// made with it use the server's default search_path.
func BaseURL(t testing.TB) string {
	t.Helper()
	began := time.Now()
	u, source, err := chooseOnce()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if took := time.Since(began); took > time.Millisecond {
		t.Logf("pgtest: using %s (set up in %v)", source, took.Round(time.Millisecond))
	}
	return u
}

// New returns a fresh, empty schema for t on the test database, with a pool
// whose connections use it. Both are removed when t ends.
func New(t testing.TB) *DB {
	t.Helper()
	return newOn(t, BaseURL(t))
}

// newOn is New on the database of dbURL.
func newOn(t testing.TB, dbURL string) *DB {
	t.Helper()
	db, cleanup, err := open(dbURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		if err := cleanup(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return db
}

// Open is New for code without a testing.TB — runnable examples: it returns
// a fresh schema with inorder's migrations applied, and a cleanup that
// closes the pool and drops the schema. It panics if no server can be had.
func Open() (*DB, func()) {
	url, _, err := chooseOnce()
	if err == nil {
		var db *DB
		var cleanup func() error
		if db, cleanup, err = open(url); err == nil {
			if err = migrate(db); err == nil {
				return db, func() { _ = cleanup() }
			}
			_ = cleanup()
		}
	}
	panic(fmt.Sprintf("pgtest: %v", err))
}

func chooseOnce() (string, string, error) {
	base.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		base.url, base.source, base.err = resolve(ctx)
	})
	return base.url, base.source, base.err
}

// open creates a schema and a pool on it; cleanup closes the pool, then drops
// the schema.
func open(baseURL string) (*DB, func() error, error) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()

	schema := "t_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	ident := pgx.Identifier{schema}.Sanitize()
	if err := adminExec(ctx, baseURL, "CREATE SCHEMA "+ident); err != nil {
		return nil, nil, fmt.Errorf("create schema: %w", err)
	}
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		// A bounded lock wait turns a connection the test leaked while
		// holding locks in the schema into an error instead of a hang.
		if err := adminExec(ctx, baseURL, "SET lock_timeout = '20s'", "DROP SCHEMA "+ident+" CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s: %w", schema, err)
		}
		return nil
	}
	dbURL, err := withSearchPath(baseURL, schema)
	if err == nil {
		var cfg *pgxpool.Config
		if cfg, err = pgxpool.ParseConfig(dbURL); err == nil {
			cfg.MaxConns = MaxConns
			var pool *pgxpool.Pool
			if pool, err = pgxpool.NewWithConfig(ctx, cfg); err == nil {
				// The pool's connections must be gone before the schema is
				// dropped.
				return &DB{Pool: pool, Schema: schema, URL: dbURL}, func() error { pool.Close(); return drop() }, nil
			}
		}
	}
	return nil, nil, errors.Join(fmt.Errorf("create pool: %w", err), drop())
}

func migrate(db *DB) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	m, err := migrations.New(db.Pool, &migrations.Options{Schema: db.Schema})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate schema %s: %w", db.Schema, err)
	}
	return nil
}

// NewMigrated is New with the inorder migrations applied to the schema.
func NewMigrated(t testing.TB) *DB {
	t.Helper()
	db := New(t)
	if err := migrate(db); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return db
}

// NewMigratedAlone is NewMigrated on a database of t's own, dropped when t
// ends, for a test that reads statistics PostgreSQL keeps per database
// (pg_stat_database's deadlocks), which other tests' schemas would blur.
func NewMigratedAlone(t testing.TB) *DB {
	t.Helper()
	base := BaseURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	name := "inorder_test_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	ident := pgx.Identifier{name}.Sanitize()
	if err := adminExec(ctx, base, "CREATE DATABASE "+ident); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if err := adminExec(ctx, base, "DROP DATABASE "+ident+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	u, err := withDatabase(base, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	db := newOn(t, u)
	if err := migrate(db); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return db
}

// resolve picks the server, makes sure the test database exists on it and
// returns that database's URL and where the server came from.
func resolve(ctx context.Context) (dbURL, source string, err error) {
	serverURL, source, err := chooseServer(ctx)
	if err != nil {
		return "", "", err
	}
	dbURL, err = withDatabase(serverURL, DatabaseName)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", source, err)
	}
	if err := ensureDatabase(ctx, serverURL, DatabaseName); err != nil {
		return "", "", fmt.Errorf("%s: %w", source, err)
	}
	return dbURL, source, nil
}

// chooseServer returns a URL of a server to use and a description of how it
// was chosen.
func chooseServer(ctx context.Context) (serverURL, source string, err error) {
	if u := os.Getenv(envURL); u != "" {
		return u, envURL, nil
	}
	addr := os.Getenv(envProbeAddr)
	if addr == "" {
		addr = defaultProbe
	}
	probeURL := "postgres://postgres@" + addr + "/postgres?sslmode=disable"
	if probe(ctx, probeURL) == nil {
		return probeURL, "server at " + addr, nil
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("inorder-pgtest-%d", os.Getuid()))
	c, err := pglocal.Start(ctx, pglocal.Options{Dir: dir})
	if err != nil {
		return "", "", fmt.Errorf("no server at %s and no private cluster: %w", addr, err)
	}
	return c.URL(), "private cluster in " + dir, nil
}

// probe reports whether the server at u accepts a connection in time.
func probe(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// ensureDatabase creates the database on the server if it is missing,
// tolerating another test binary creating it at the same time.
func ensureDatabase(ctx context.Context, serverURL, name string) error {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	for attempt := 1; ; attempt++ {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
			return fmt.Errorf("look up database %s: %w", name, err)
		}
		if exists {
			return nil
		}
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505"):
			// duplicate_database, or unique_violation when a concurrent
			// CREATE DATABASE committed first.
			return nil
		case errors.As(err, &pgErr) && pgErr.Code == "55006" && attempt < 50:
			// object_in_use: someone is connected to the template.
			time.Sleep(100 * time.Millisecond)
		default:
			return fmt.Errorf("create database %s: %w", name, err)
		}
	}
}

// adminExec runs statements, in order, on a short-lived connection.
func adminExec(ctx context.Context, connURL string, stmts ...string) error {
	conn, err := pgx.Connect(ctx, connURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	for _, stmt := range stmts {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return err
		}
	}
	return nil
}

// withDatabase returns serverURL pointing at database name.
func withDatabase(serverURL, name string) (string, error) {
	u, err := parseURL(serverURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// withSearchPath returns dbURL with search_path = schema added to its
// startup options. Spaces are encoded as %20, not +, so libpq (psql) reads
// the URL the same way pgx does.
func withSearchPath(dbURL, schema string) (string, error) {
	u, err := parseURL(dbURL)
	if err != nil {
		return "", err
	}
	q := u.Query()
	opts := strings.TrimSpace(q.Get("options") + " -c search_path=" + schema)
	q.Set("options", opts)
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return u.String(), nil
}

func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return nil, fmt.Errorf("database URL must be a postgres:// URL, got scheme %q", u.Scheme)
	}
	return u, nil
}

// DropGenerationSchemas drops the schemas named after db's with a suffix
// ("<Schema>_…"): those of a projection's later generations, which live
// beside the test's schema, so that the test's end does not drop them. An
// error fails the test; the other schemas are still dropped.
func (db *DB) DropGenerationSchemas(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)`, db.Schema+"_")
	if err != nil {
		t.Errorf("pgtest: list generation schemas: %v", err)
		return
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Errorf("pgtest: list generation schemas: %v", err)
	}
	for _, s := range schemas {
		if _, err := db.Pool.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{s}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("pgtest: drop %s: %v", s, err)
		}
	}
}
