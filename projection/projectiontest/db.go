package projectiontest

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/internal/pgtest"
)

// DB is a fresh PostgreSQL schema with inorder's tables migrated, for one
// test or example: what a projection's processor needs
// (projection.Config.Schema) and nothing else in it.
type DB struct {
	// Pool connects with search_path set to Schema on every connection, so
	// a projection's unqualified table names land in the schema too.
	Pool *pgxpool.Pool
	// Schema is the fresh schema, dropped with CASCADE at the end.
	Schema string
	// URL connects the same way, for subprocesses (psql, a worker binary).
	URL string
}

// NewDB returns a migrated schema of t's own, dropped when t ends, on a real
// PostgreSQL: TEST_DATABASE_URL if set, else postgres://postgres@127.0.0.1:5432
// if it answers, else a private cluster started from the installed server
// binaries (/usr/lib/postgresql/*/bin) and shared by the test binaries of
// the machine. Tests using it may run in parallel.
func NewDB(t testing.TB) *DB {
	t.Helper()
	db := pgtest.NewMigrated(t)
	return &DB{Pool: db.Pool, Schema: db.Schema, URL: db.URL}
}

// OpenDB is NewDB for code without a testing.TB — runnable examples: it
// returns the schema and a cleanup that closes the pool and drops it. It
// panics when no server can be had.
func OpenDB() (*DB, func()) {
	db, cleanup := pgtest.Open()
	return &DB{Pool: db.Pool, Schema: db.Schema, URL: db.URL}, cleanup
}
