package migrations

import (
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

func TestEmbeddedMigrationsAreValid(t *testing.T) {
	sub, err := fs.Sub(embedded, "sql")
	require.NoError(t, err)
	migs, err := load(sub)
	require.NoError(t, err)
	require.NotEmpty(t, migs)
	for i, mig := range migs {
		require.Equal(t, i+1, mig.version)
		require.NotEmpty(t, mig.down, "version %d", mig.version)
	}
	require.Equal(t, "init", migs[0].name)
}

// TestMigrationDirectives holds the review of the directives of the
// migrations up to 010 (docs/operations.md, "Online and offline
// migrations"), so that none changes unnoticed; a new migration without a
// directive fails to load (TestLoad).
func TestMigrationDirectives(t *testing.T) {
	sub, err := fs.Sub(embedded, "sql")
	require.NoError(t, err)
	migs, err := load(sub)
	require.NoError(t, err)
	reviewed := map[string]bool{
		"init":                true,  // new tables in an empty schema
		"applied_in_versions": false, // UPDATE of every versions row; old workers write the log elsewhere
		"operations":          false, // checkpoints' columns replaced under old workers
		"effects":             true,  // new table, index on it, sequence
		"generations":         true,  // new tables
		"effects_pending":     false, // CREATE INDEX (not CONCURRENTLY) + DROP INDEX on effects
		"operator":            false, // rejected rewritten and indexed; fingerprints change
		"events":              true,  // new table, indexes, function, trigger
		"effects_recoveries":  true,  // ADD COLUMN with a constant default
		"owners":              true,  // new table
	}
	got := map[string]bool{}
	for _, mig := range migs {
		if _, ok := reviewed[mig.name]; ok {
			got[mig.name] = mig.online
		}
	}
	require.Equal(t, reviewed, got, "the directives of the reviewed migrations")
}

func TestNewRequiresPool(t *testing.T) {
	_, err := New(nil, nil)
	require.ErrorContains(t, err, "pool is required")
}

func TestNewOptions(t *testing.T) {
	fsys := files("001_a.up.sql", "001_a.down.sql")
	m, err := newWithFS(nil, nil, fsys)
	require.NoError(t, err)
	require.Equal(t, DefaultSchema, m.Schema())

	m, err = newWithFS(nil, &Options{Schema: `Odd "name"`}, fsys)
	require.NoError(t, err)
	require.Equal(t, `Odd "name"`, m.Schema())
	require.Equal(t, `"Odd ""name"""."schema_migrations"`, m.table)
	require.NotEqual(t, lockKey("a"), lockKey("b"))

	_, err = newWithFS(nil, &Options{Schema: string(make([]byte, 64))}, fsys)
	require.ErrorContains(t, err, "invalid schema name")
}

func TestLoad(t *testing.T) {
	for _, tc := range []struct {
		name     string
		fsys     fstest.MapFS
		wantErr  string
		versions int
		index    string // the index a no-transaction migration builds, when set
	}{
		{name: "valid", fsys: files("001_a.up.sql", "001_a.down.sql", "002_b.up.sql", "002_b.down.sql", "003_c.up.sql", "003_c.down.sql"), versions: 3},
		{name: "unpadded numbers", fsys: files("1_a.up.sql", "1_a.down.sql", "2_b.up.sql", "2_b.down.sql"), versions: 2},
		{name: "empty down is allowed", fsys: fstest.MapFS{"001_a.up.sql": {Data: []byte("-- inorder:offline\nSELECT 1;")}, "001_a.down.sql": {}}, versions: 1},
		{name: "no directive", fsys: fstest.MapFS{"001_a.up.sql": {Data: []byte("SELECT 1;")}, "001_a.down.sql": {}}, wantErr: `001_a.up.sql: first line must be "-- inorder:online" or "-- inorder:offline"`},
		{name: "directive not first", fsys: fstest.MapFS{"001_a.up.sql": {Data: []byte("-- a comment\n-- inorder:online\nSELECT 1;")}, "001_a.down.sql": {}}, wantErr: `001_a.up.sql: first line must be`},
		{name: "misspelt directive", fsys: fstest.MapFS{"001_a.up.sql": {Data: []byte("-- inorder:onlin\nSELECT 1;")}, "001_a.down.sql": {}}, wantErr: `001_a.up.sql: first line must be`},
		{name: "directive glued to text", fsys: fstest.MapFS{"001_a.up.sql": {Data: []byte("-- inorder:onlineish\nSELECT 1;")}, "001_a.down.sql": {}}, wantErr: `001_a.up.sql: first line must be`},
		{name: "no files", fsys: fstest.MapFS{}, wantErr: "no migration files"},
		{name: "gap", fsys: files("001_a.up.sql", "001_a.down.sql", "003_c.up.sql", "003_c.down.sql"), wantErr: "gap: version 3 follows 1"},
		{name: "does not start at 1", fsys: files("002_b.up.sql", "002_b.down.sql"), wantErr: "versions start at 2, not 1"},
		{name: "version 0", fsys: files("000_a.up.sql", "000_a.down.sql"), wantErr: "version must be a positive number"},
		{name: "duplicate version", fsys: files("001_a.up.sql", "001_a.down.sql", "001_b.up.sql", "001_b.down.sql"), wantErr: `version 1 is already named "a"`},
		{name: "duplicate spelling", fsys: files("001_a.up.sql", "001_a.down.sql", "1_a.up.sql"), wantErr: "duplicate up migration for version 1"},
		{name: "missing down", fsys: files("001_a.up.sql", "001_a.down.sql", "002_b.up.sql"), wantErr: "002_b.up.sql: no down migration for version 2"},
		{name: "missing up", fsys: files("001_a.up.sql", "001_a.down.sql", "002_b.down.sql"), wantErr: "002_b.down.sql: no up migration for version 2"},
		{name: "bad name", fsys: files("001_a.up.sql", "001_a.down.sql", "002-b.up.sql"), wantErr: "002-b.up.sql: name is not NNN_name"},
		{name: "no direction", fsys: files("001_a.sql"), wantErr: "001_a.sql: name is not NNN_name"},
		{name: "empty up", fsys: fstest.MapFS{"001_a.up.sql": {Data: []byte(" \n")}, "001_a.down.sql": {Data: []byte("x")}}, wantErr: "001_a.up.sql: empty up migration"},
		{name: "index built concurrently", fsys: noTx("CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v);", "DROP INDEX CONCURRENTLY IF EXISTS t_v;"), versions: 1},
		{name: "concurrently in a transaction", fsys: fstest.MapFS{"001_a.up.sql": {Data: []byte("-- inorder:online\nCREATE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v);")}, "001_a.down.sql": {}}, wantErr: `001_a.up.sql: CONCURRENTLY cannot run in a transaction: the up migration's second line must be "-- inorder:no-transaction"`},
		{name: "concurrently in a transaction's down", fsys: fstest.MapFS{"001_a.up.sql": {Data: []byte("-- inorder:online\nSELECT 1;")}, "001_a.down.sql": {Data: []byte("DROP INDEX CONCURRENTLY IF EXISTS t_v; -- CONCURRENTLY in a comment is fine")}}, wantErr: `001_a.down.sql: CONCURRENTLY cannot run in a transaction`},
		{name: "concurrently only in comments", fsys: fstest.MapFS{"001_a.up.sql": {Data: []byte("-- inorder:offline — CREATE INDEX without CONCURRENTLY\n-- not CONCURRENTLY\nSELECT 1;")}, "001_a.down.sql": {}}, versions: 1},
		{name: "two statements outside a transaction", fsys: noTx("CREATE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v);\nCREATE INDEX CONCURRENTLY IF NOT EXISTS t_w ON t (w);", "DROP INDEX CONCURRENTLY IF EXISTS t_v;"), wantErr: "001_a.up.sql: a -- inorder:no-transaction migration holds one statement (PostgreSQL runs several"},
		{name: "no statement outside a transaction", fsys: noTx("CREATE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v);", "-- nothing"), wantErr: "001_a.down.sql: a -- inorder:no-transaction migration holds one statement, this one none"},
		{name: "outside a transaction for no reason", fsys: noTx("CREATE INDEX IF NOT EXISTS t_v ON t (v);", "DROP INDEX IF EXISTS t_v;"), wantErr: "001_a.up.sql: -- inorder:no-transaction is for statements that cannot run in a transaction"},
		{name: "concurrent build without IF NOT EXISTS", fsys: noTx("CREATE INDEX CONCURRENTLY t_v ON t (v);", "DROP INDEX CONCURRENTLY IF EXISTS t_v;"), wantErr: "001_a.up.sql: CREATE INDEX CONCURRENTLY must say IF NOT EXISTS and name the index"},
		{name: "concurrent build without a name", fsys: noTx("CREATE INDEX CONCURRENTLY ON t (v);", "SELECT 1 -- CONCURRENTLY"), wantErr: "CREATE INDEX CONCURRENTLY must say IF NOT EXISTS and name the index"},
		{name: "concurrent drop without IF EXISTS", fsys: noTx("CREATE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v);", "DROP INDEX CONCURRENTLY t_v;"), wantErr: "001_a.down.sql: DROP INDEX CONCURRENTLY must say IF EXISTS"},
		{name: "offline outside a transaction", fsys: fstest.MapFS{"001_a.up.sql": {Data: []byte("-- inorder:offline\n-- inorder:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v);")}, "001_a.down.sql": {Data: []byte("DROP INDEX CONCURRENTLY IF EXISTS t_v;")}}, wantErr: "001_a.up.sql: a -- inorder:no-transaction migration builds or drops an index without blocking writers: it is online"},
		// "--" inside a literal, a quoted identifier or a dollar-quoted body
		// starts no comment: what follows it on the line is code.
		{name: "-- in a string literal", fsys: tx("COMMENT ON TABLE t IS 'rows -- not events'; CREATE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v);"), wantErr: `001_a.up.sql: CONCURRENTLY cannot run in a transaction`},
		{name: "-- in a literal with a doubled quote", fsys: tx("COMMENT ON TABLE t IS 'it''s -- here'; CREATE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v);"), wantErr: `001_a.up.sql: CONCURRENTLY cannot run in a transaction`},
		{name: "-- in an escape string", fsys: tx(`COMMENT ON TABLE t IS E'it\'s -- here'; CREATE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v);`), wantErr: `001_a.up.sql: CONCURRENTLY cannot run in a transaction`},
		{name: "-- in a quoted identifier", fsys: tx(`CREATE TABLE "a--b" (v int); CREATE INDEX CONCURRENTLY IF NOT EXISTS t_v ON "a--b" (v);`), wantErr: `001_a.up.sql: CONCURRENTLY cannot run in a transaction`},
		{name: "-- in a dollar-quoted body", fsys: tx("CREATE FUNCTION f() RETURNS text LANGUAGE sql AS $$ SELECT '--' $$; CREATE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v);"), wantErr: `001_a.up.sql: CONCURRENTLY cannot run in a transaction`},
		{name: "-- in a tagged dollar-quoted body", fsys: tx("DO $body$ BEGIN PERFORM 1; -- it's $$ here\nEND $body$; CREATE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v);"), wantErr: `001_a.up.sql: CONCURRENTLY cannot run in a transaction`},
		{name: "-- in a literal outside a transaction", fsys: noTx("CREATE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v) WHERE k <> '--'; CREATE INDEX CONCURRENTLY IF NOT EXISTS t_w ON t (w);", "DROP INDEX CONCURRENTLY IF EXISTS t_v;"), wantErr: "001_a.up.sql: a -- inorder:no-transaction migration holds one statement (PostgreSQL runs several"},
		{name: "-- in an index's quoted name", fsys: noTx(`CREATE INDEX CONCURRENTLY IF NOT EXISTS "t--v" ON t (v);`, `DROP INDEX CONCURRENTLY IF EXISTS "t--v";`), versions: 1, index: "t--v"},
		// A quote inside a comment opens nothing.
		{name: "quote in a line comment", fsys: tx("SELECT 1; -- it's a comment\nCREATE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v);"), wantErr: `001_a.up.sql: CONCURRENTLY cannot run in a transaction`},
		{name: "quote in a block comment", fsys: tx("SELECT 1; /* it's /* nested */ a comment */ CREATE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v);"), wantErr: `001_a.up.sql: CONCURRENTLY cannot run in a transaction`},
		{name: "comment after a literal", fsys: tx("COMMENT ON TABLE t IS 'a ''quoted'' word'; -- not CONCURRENTLY\nSELECT $1::int, a$b FROM t; -- not CONCURRENTLY either"), versions: 1},
		{name: "directory", fsys: fstest.MapFS{"001_a.up.sql": {Data: []byte("-- inorder:online\nx")}, "001_a.down.sql": {Data: []byte("x")}, "sub/x.sql": {Data: []byte("x")}}, wantErr: "unexpected directory sub"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			migs, err := load(tc.fsys)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, ErrInvalid)
				require.ErrorContains(t, err, tc.wantErr)
				_, err = newWithFS(nil, nil, tc.fsys)
				require.ErrorIs(t, err, ErrInvalid)
				return
			}
			require.NoError(t, err)
			require.Len(t, migs, tc.versions)
			for i, mig := range migs {
				require.Equal(t, i+1, mig.version)
			}
			if tc.index != "" {
				require.Equal(t, tc.index, migs[0].index)
			}
		})
	}
}

// tx returns a MapFS holding version 1 as an online migration run in a
// transaction, with the given up statements.
func tx(up string) fstest.MapFS {
	return fstest.MapFS{
		"001_a.up.sql":   {Data: []byte("-- inorder:online\n" + up + "\n")},
		"001_a.down.sql": {Data: []byte("SELECT 1;")},
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	_, err := load(files("002_b.up.sql", "003_c.down.sql"))
	require.ErrorContains(t, err, "versions start at 2")
	require.ErrorContains(t, err, "no down migration for version 2")
	require.ErrorContains(t, err, "no up migration for version 3")
}

// noTx returns a MapFS holding version 1 as a no-transaction migration
// with the given up and down statements.
func noTx(up, down string) fstest.MapFS {
	return fstest.MapFS{
		"001_a.up.sql":   {Data: []byte("-- inorder:online — an index built without blocking writers\n-- inorder:no-transaction\n-- a comment\n" + up + "\n")},
		"001_a.down.sql": {Data: []byte(down)},
	}
}

func TestIndexName(t *testing.T) {
	for sql, want := range map[string]string{
		"CREATE INDEX CONCURRENTLY IF NOT EXISTS Payments_By_Day ON t (v)":         "payments_by_day",
		`CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS "Mixed ""Case""" ON t (v)`: `Mixed "Case"`,
		"create index concurrently if not exists t_v\n\ton t using btree (v)":      "t_v",
	} {
		mig := migration{online: true, noTx: true, up: sql, down: "DROP INDEX CONCURRENTLY IF EXISTS x"}
		require.NoError(t, checkTransaction(&mig, "up", "down"), sql)
		require.Equal(t, want, mig.index, sql)
	}
}

// files returns a MapFS holding the named files, each with a trivial body.
func files(names ...string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for _, name := range names {
		fsys[name] = &fstest.MapFile{Data: []byte("-- inorder:online\nSELECT 1;")}
	}
	return fsys
}
