// Package pgtest gives each test its own empty (or migrated) PostgreSQL
// schema, so tests can run in parallel, in any number of packages, without
// sharing state.
//
// Usage:
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		db := pgtest.NewMigrated(t) // or pgtest.New(t) for an empty schema
//		_, err := db.Pool.Exec(ctx, "INSERT INTO versions ...") // lands in db.Schema
//		...
//	}
//
// Every connection of DB.Pool, and every connection opened with DB.URL (for
// subprocesses, psql included), has search_path set to DB.Schema only, so
// unqualified names resolve to the test's schema. The schema is dropped
// with CASCADE when the test ends.
//
// # Choosing the server
//
// The server is chosen once per test binary, on first use:
//
//  1. TEST_DATABASE_URL, if set (a postgres:// URL; its database part is
//     ignored).
//  2. Otherwise postgres://postgres@127.0.0.1:5432 (trust authentication),
//     if it accepts a connection within about two seconds. Setting
//     INORDER_PGTEST_PROBE_ADDR to another host:port probes that instead;
//     pointing it at a closed port (127.0.0.1:1) forces step 3.
//  3. Otherwise a private cluster started with internal/pglocal in
//     os.TempDir()/inorder-pgtest-<uid>. It is shared by every test binary
//     (pglocal.Start is guarded by a file lock, so the packages go test runs
//     in parallel agree on one cluster) and left running for the next run;
//     its log is postgres.log in that directory.
//
// On the chosen server the database inorder_test is created if missing
// (concurrent creation by another test binary is tolerated), and all
// schemas are created in it. BaseURL returns its URL.
package pgtest
