package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed sql/*.sql
var embedded embed.FS

// DefaultSchema is the schema migrations are applied to when
// Options.Schema is empty.
const DefaultSchema = "inorder"

var (
	// ErrInvalid is returned, wrapped, by New when the migration files are
	// misnamed, misnumbered, duplicated, empty or missing their down half.
	ErrInvalid = errors.New("migrations: invalid migration files")

	// ErrUnknownVersion is returned, wrapped, when the database has applied
	// a migration version this binary does not contain: it was migrated by
	// a newer release.
	ErrUnknownVersion = errors.New("migrations: database has an applied migration unknown to this binary")

	// ErrWorkersConnected is returned, wrapped in an *OfflineError, by
	// Migrate and MigrateTx when a pending migration is offline and other
	// inorder workers are connected to the schema (see Migrator.Workers).
	// Nothing was applied. Stop the workers, or set Options.Force.
	ErrWorkersConnected = errors.New("migrations: offline migration refused while inorder workers are connected")
)

// Options configures a Migrator. The zero value is valid.
type Options struct {
	// Schema is the schema the migrations are applied to and the tracking
	// table lives in. Empty means DefaultSchema.
	Schema string
	// Logger receives one message per step. Nil discards them.
	Logger *slog.Logger
	// DryRun makes Migrate, MigrateTx and Rollback report the steps they
	// would take without changing the database (not even creating the
	// schema).
	DryRun bool
	// Force makes Migrate and MigrateTx apply offline migrations even while
	// other inorder workers are connected (see ErrWorkersConnected). Those
	// workers may then fail or block until the step is done.
	Force bool
	// LockTimeout bounds how long an online step waits for a table lock
	// (PostgreSQL's lock_timeout, set for the step's transaction): a brief
	// ACCESS EXCLUSIVE lock queued behind a long transaction would otherwise
	// hold every writer of the table behind it. A step that times out is
	// tried again, up to five times, after a pause that grows by LockTimeout
	// each time, before Migrate returns the error. MigrateTx sets no
	// lock_timeout (the transaction is the caller's).
	// Zero means 5s; negative disables it. Offline steps wait as long as
	// they need.
	LockTimeout time.Duration
}

// Direction tells whether a Result applied (Up) or reverted (Down)
// migrations.
type Direction string

const (
	// Up is the direction of Migrate and MigrateTx.
	Up Direction = "up"
	// Down is the direction of Rollback.
	Down Direction = "down"
)

// Step is one migration applied or reverted, or that would be in a dry run.
type Step struct {
	// Version is the migration's number.
	Version int
	// Name is the migration's name, the part of its file name between the
	// number and the direction.
	Name string
	// Online tells whether the migration may run while workers of the
	// previous schema version process events (its file's first line is
	// "-- inorder:online"), or must not ("-- inorder:offline").
	Online bool
	// Duration is how long the step took; zero in a dry run.
	Duration time.Duration
}

// Result reports what Migrate, MigrateTx or Rollback did.
type Result struct {
	// Direction is Up for Migrate and MigrateTx, Down for Rollback.
	Direction Direction
	// DryRun is true when nothing was changed.
	DryRun bool
	// Steps lists the migrations in the order they were (or would be)
	// run. On error, it lists those that completed before it.
	Steps []Step
}

// Versions returns the version of every step, in order.
func (r *Result) Versions() []int {
	versions := make([]int, len(r.Steps))
	for i, s := range r.Steps {
		versions[i] = s.Version
	}
	return versions
}

// Status describes one migration's state in the database.
type Status struct {
	// Version is the migration's number.
	Version int
	// Name is the migration's name.
	Name string
	// Online is the migration's directive (see Step.Online); for an
	// Unknown version, what the newer release that applied it recorded
	// (false when it recorded nothing).
	Online bool
	// Applied is true when the migration is recorded as applied.
	Applied bool
	// AppliedAt is when it was applied; zero if it was not.
	AppliedAt time.Time
	// Unknown is true for a version recorded as applied that this binary
	// does not contain.
	Unknown bool
}

// Migrator applies and reverts the embedded migrations in one schema.
type Migrator struct {
	pool       *pgxpool.Pool
	schema     string
	ident      string // quoted schema
	table      string // quoted schema-qualified tracking table
	lockKey    int64
	logger     *slog.Logger
	dryRun     bool
	force      bool
	lockWait   time.Duration // lock_timeout of online steps; 0: none
	migrations []migration   // migrations[i].version == i+1
}

type migration struct {
	version  int
	name     string
	online   bool
	up, down string
}

// appliedRow is one row of the tracking table.
type appliedRow struct {
	name   string
	at     time.Time
	online bool // recorded online; false when the release that applied it did not record it
}

// querier is what both *pgx.Conn and pgx.Tx offer.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// New returns a Migrator for the embedded migrations, after checking that
// they are well formed (see the package documentation). opts may be nil.
func New(pool *pgxpool.Pool, opts *Options) (*Migrator, error) {
	if pool == nil {
		return nil, errors.New("migrations: pool is required")
	}
	sub, err := fs.Sub(embedded, "sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: open embedded files: %w", err)
	}
	return newWithFS(pool, opts, sub)
}

// newWithFS is New reading the migration files from the root of fsys.
func newWithFS(pool *pgxpool.Pool, opts *Options, fsys fs.FS) (*Migrator, error) {
	if opts == nil {
		opts = &Options{}
	}
	schema := opts.Schema
	if schema == "" {
		schema = DefaultSchema
	}
	if len(schema) > 63 || strings.ContainsRune(schema, 0) {
		return nil, fmt.Errorf("migrations: invalid schema name %q", schema)
	}
	migs, err := load(fsys)
	if err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	lockWait := opts.LockTimeout
	switch {
	case lockWait == 0:
		lockWait = 5 * time.Second
	case lockWait < 0:
		lockWait = 0
	}
	return &Migrator{
		force:      opts.Force,
		lockWait:   lockWait,
		pool:       pool,
		schema:     schema,
		ident:      pgx.Identifier{schema}.Sanitize(),
		table:      pgx.Identifier{schema, "schema_migrations"}.Sanitize(),
		lockKey:    lockKey(schema),
		logger:     logger.With("schema", schema),
		dryRun:     opts.DryRun,
		migrations: migs,
	}, nil
}

var fileRE = regexp.MustCompile(`^([0-9]+)_([A-Za-z0-9_]+)\.(up|down)\.sql$`)

// directiveRE matches the first line of an up migration: whether it is
// online, then optionally why.
var directiveRE = regexp.MustCompile(`^-- inorder:(online|offline)(?:$|[ \t])`)

// load reads and validates every file at the root of fsys.
func load(fsys fs.FS) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: read files: %w", err)
	}
	type pair struct {
		name             string
		upFile, downFile string
		up, down         string
		hasUp, hasDown   bool
		online           bool
	}
	byVersion := map[int]*pair{}
	var errs []error
	for _, e := range entries {
		file := e.Name()
		if e.IsDir() {
			errs = append(errs, fmt.Errorf("unexpected directory %s", file))
			continue
		}
		m := fileRE.FindStringSubmatch(file)
		if m == nil {
			errs = append(errs, fmt.Errorf("%s: name is not NNN_name.up.sql or NNN_name.down.sql", file))
			continue
		}
		version, err := strconv.Atoi(m[1])
		if err != nil || version < 1 {
			errs = append(errs, fmt.Errorf("%s: version must be a positive number", file))
			continue
		}
		body, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s: %w", file, err)
		}
		p := byVersion[version]
		if p == nil {
			p = &pair{name: m[2]}
			byVersion[version] = p
		}
		if p.name != m[2] {
			errs = append(errs, fmt.Errorf("%s: version %d is already named %q", file, version, p.name))
			continue
		}
		switch m[3] {
		case "up":
			if p.hasUp {
				errs = append(errs, fmt.Errorf("%s: duplicate up migration for version %d (also %s)", file, version, p.upFile))
				continue
			}
			if strings.TrimSpace(string(body)) == "" {
				errs = append(errs, fmt.Errorf("%s: empty up migration", file))
			} else {
				first, _, _ := strings.Cut(string(body), "\n")
				d := directiveRE.FindStringSubmatch(strings.TrimSuffix(first, "\r"))
				if d == nil {
					errs = append(errs, fmt.Errorf("%s: first line must be \"-- inorder:online\" or \"-- inorder:offline\" (may its old and new workers run while it does?), not %q", file, first))
				}
				p.online = d != nil && d[1] == "online"
			}
			p.hasUp, p.upFile, p.up = true, file, string(body)
		case "down":
			if p.hasDown {
				errs = append(errs, fmt.Errorf("%s: duplicate down migration for version %d (also %s)", file, version, p.downFile))
				continue
			}
			p.hasDown, p.downFile, p.down = true, file, string(body)
		}
	}
	versions := make([]int, 0, len(byVersion))
	for v := range byVersion {
		versions = append(versions, v)
	}
	sort.Ints(versions)
	migs := make([]migration, 0, len(versions))
	for i, v := range versions {
		p := byVersion[v]
		if !p.hasUp {
			errs = append(errs, fmt.Errorf("%s: no up migration for version %d", p.downFile, v))
		}
		if !p.hasDown {
			errs = append(errs, fmt.Errorf("%s: no down migration for version %d", p.upFile, v))
		}
		switch {
		case i == 0 && v != 1:
			errs = append(errs, fmt.Errorf("gap: versions start at %d, not 1", v))
		case i > 0 && v != versions[i-1]+1:
			errs = append(errs, fmt.Errorf("gap: version %d follows %d", v, versions[i-1]))
		}
		migs = append(migs, migration{version: v, name: p.name, online: p.online, up: p.up, down: p.down})
	}
	if len(entries) == 0 {
		errs = append(errs, errors.New("no migration files"))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return migs, nil
}

// lockKey derives the advisory lock key for a schema.
func lockKey(schema string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("inorder/migrations\x00" + schema))
	return int64(h.Sum64())
}

// Schema returns the schema the Migrator works on.
func (m *Migrator) Schema() string { return m.schema }

// Migrate applies every pending migration in order, each in its own
// transaction, holding an advisory lock on the schema throughout so that
// concurrent migrators of the same schema run one after the other.
func (m *Migrator) Migrate(ctx context.Context) (*Result, error) {
	res := &Result{Direction: Up, DryRun: m.dryRun}
	err := m.withLock(ctx, func(conn *pgx.Conn) error {
		applied, err := m.prepare(ctx, conn)
		if err != nil {
			return err
		}
		pending := m.pending(applied)
		if err := m.refuseOffline(ctx, conn, applied, pending); err != nil {
			return err
		}
		for _, mig := range pending {
			began := time.Now()
			if !m.dryRun {
				if err := m.apply(ctx, conn, mig); err != nil {
					return fmt.Errorf("migrations: apply %03d_%s: %w", mig.version, mig.name, err)
				}
			}
			m.record(res, mig, began)
		}
		return nil
	})
	return res, err
}

// MigrateTx applies every pending migration inside tx, which the caller
// commits or rolls back. It takes a transaction-level advisory lock on the
// schema and leaves tx's search_path as it found it.
func (m *Migrator) MigrateTx(ctx context.Context, tx pgx.Tx) (*Result, error) {
	res := &Result{Direction: Up, DryRun: m.dryRun}
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", m.lockKey); err != nil {
		return res, fmt.Errorf("migrations: lock schema %s: %w", m.schema, err)
	}
	applied, err := m.prepare(ctx, tx)
	if err != nil {
		return res, err
	}
	pending := m.pending(applied)
	if err := m.refuseOffline(ctx, tx, applied, pending); err != nil {
		return res, err
	}
	if len(pending) == 0 || m.dryRun {
		for _, mig := range pending {
			m.record(res, mig, time.Now())
		}
		return res, nil
	}
	var searchPath string
	if err := tx.QueryRow(ctx, "SELECT current_setting('search_path')").Scan(&searchPath); err != nil {
		return res, fmt.Errorf("migrations: read search_path: %w", err)
	}
	for _, mig := range pending {
		began := time.Now()
		if err := m.up(ctx, tx, mig); err != nil {
			return res, fmt.Errorf("migrations: apply %03d_%s: %w", mig.version, mig.name, err)
		}
		m.record(res, mig, began)
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", searchPath); err != nil {
		return res, fmt.Errorf("migrations: restore search_path: %w", err)
	}
	return res, nil
}

// Rollback reverts the last steps applied migrations, newest first, each in
// its own transaction, under the same advisory lock as Migrate. Asking for
// more steps than are applied reverts them all.
func (m *Migrator) Rollback(ctx context.Context, steps int) (*Result, error) {
	res := &Result{Direction: Down, DryRun: m.dryRun}
	if steps < 0 {
		return res, fmt.Errorf("migrations: rollback steps must not be negative, got %d", steps)
	}
	if steps == 0 {
		return res, nil
	}
	err := m.withLock(ctx, func(conn *pgx.Conn) error {
		applied, err := m.readApplied(ctx, conn)
		if err != nil {
			return err
		}
		if err := m.checkKnown(applied, false); err != nil {
			return err
		}
		for i := len(m.migrations) - 1; i >= 0 && len(res.Steps) < steps; i-- {
			mig := m.migrations[i]
			if _, ok := applied[mig.version]; !ok {
				continue
			}
			began := time.Now()
			if !m.dryRun {
				if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return m.down(ctx, tx, mig) }); err != nil {
					return fmt.Errorf("migrations: revert %03d_%s: %w", mig.version, mig.name, err)
				}
			}
			m.record(res, mig, began)
		}
		return nil
	})
	return res, err
}

// Status returns every migration this binary contains, in version order,
// with whether and when it was applied, followed by any applied version the
// binary does not contain (Unknown).
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: acquire connection: %w", err)
	}
	defer conn.Release()
	applied, err := m.readApplied(ctx, conn.Conn())
	if err != nil {
		return nil, err
	}
	statuses := make([]Status, 0, len(m.migrations))
	for _, mig := range m.migrations {
		s := Status{Version: mig.version, Name: mig.name, Online: mig.online}
		if row, ok := applied[mig.version]; ok {
			s.Applied, s.AppliedAt = true, row.at
		}
		statuses = append(statuses, s)
	}
	for _, v := range sortedVersions(applied) {
		if v > len(m.migrations) {
			statuses = append(statuses, Status{Version: v, Name: applied[v].name, Online: applied[v].online, Applied: true, AppliedAt: applied[v].at, Unknown: true})
		}
	}
	return statuses, nil
}

// withLock runs fn on a dedicated connection holding the schema's
// session-level advisory lock.
func (m *Migrator) withLock(ctx context.Context, fn func(conn *pgx.Conn) error) error {
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrations: acquire connection: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", m.lockKey); err != nil {
		return fmt.Errorf("migrations: lock schema %s: %w", m.schema, err)
	}
	defer func() {
		unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(unlockCtx, "SELECT pg_advisory_unlock($1)", m.lockKey); err != nil {
			// Closing the session is the other way to release the lock;
			// the pool discards the closed connection.
			m.logger.Warn("migrations: unlock failed, closing connection", "error", err)
			_ = conn.Conn().Close(unlockCtx)
		}
	}()
	return fn(conn.Conn())
}

// prepare creates the schema and tracking table when needed (not in a dry
// run), reads the applied versions and rejects unknown ones.
func (m *Migrator) prepare(ctx context.Context, q querier) (map[int]appliedRow, error) {
	if !m.dryRun {
		if err := m.ensure(ctx, q); err != nil {
			return nil, err
		}
	}
	applied, err := m.readApplied(ctx, q)
	if err != nil {
		return nil, err
	}
	if err := m.checkKnown(applied, true); err != nil {
		return nil, err
	}
	return applied, nil
}

// ensure creates the schema and the tracking table if they are missing.
// Existence is checked first so that a role without CREATE privilege on the
// database can still migrate a schema that already exists.
func (m *Migrator) ensure(ctx context.Context, q querier) error {
	var exists bool
	if err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", m.schema).Scan(&exists); err != nil {
		return fmt.Errorf("migrations: look up schema %s: %w", m.schema, err)
	}
	if !exists {
		if _, err := q.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+m.ident); err != nil {
			return fmt.Errorf("migrations: create schema %s: %w", m.schema, err)
		}
	}
	if _, err := q.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+m.table+` (
	version    integer PRIMARY KEY,
	name       text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now(),
	online     boolean
)`); err != nil {
		return fmt.Errorf("migrations: create tracking table: %w", err)
	}
	// online records each migration's directive, so that an older binary
	// finding a version it does not know can tell an additive one it may
	// keep working beside (checkKnown). Tables created before it get the
	// column (NULL: not recorded); the check spares them the lock.
	var has bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
WHERE attrelid = to_regclass($1) AND attname = 'online' AND NOT attisdropped)`, m.table).Scan(&has); err != nil {
		return fmt.Errorf("migrations: look up tracking table: %w", err)
	}
	if !has {
		if _, err := q.Exec(ctx, "ALTER TABLE "+m.table+" ADD COLUMN IF NOT EXISTS online boolean"); err != nil {
			return fmt.Errorf("migrations: add online to tracking table: %w", err)
		}
	}
	return nil
}

// readApplied returns the tracking table's rows by version; none if the
// table does not exist yet.
func (m *Migrator) readApplied(ctx context.Context, q querier) (map[int]appliedRow, error) {
	var exists bool
	if err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", m.table).Scan(&exists); err != nil {
		return nil, fmt.Errorf("migrations: look up tracking table: %w", err)
	}
	applied := map[int]appliedRow{}
	if !exists {
		return applied, nil
	}
	// to_jsonb: the online column is missing from a table no release
	// since it has migrated.
	rows, err := q.Query(ctx, "SELECT version, name, applied_at, coalesce((to_jsonb(t) ->> 'online')::boolean, false) FROM "+m.table+" t")
	if err != nil {
		return nil, fmt.Errorf("migrations: read tracking table: %w", err)
	}
	var (
		version int
		row     appliedRow
	)
	_, err = pgx.ForEachRow(rows, []any{&version, &row.name, &row.at, &row.online}, func() error {
		applied[version] = row
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrations: read tracking table: %w", err)
	}
	return applied, nil
}

// checkKnown rejects applied versions the binary does not contain —
// unless online is set and a newer release recorded every one of them as
// online: this binary's workers keep working beside those — and warns
// about name mismatches.
func (m *Migrator) checkKnown(applied map[int]appliedRow, online bool) error {
	var unknown []string
	newerOnline := true
	for _, v := range sortedVersions(applied) {
		if v < 1 || v > len(m.migrations) {
			unknown = append(unknown, fmt.Sprintf("%d (%s)", v, applied[v].name))
			newerOnline = newerOnline && v > len(m.migrations) && applied[v].online
			continue
		}
		if mig := m.migrations[v-1]; applied[v].name != mig.name {
			m.logger.Warn("migrations: applied name differs from file", "version", v, "applied", applied[v].name, "file", mig.name)
		}
	}
	if len(unknown) > 0 && online && newerOnline {
		m.logger.Warn("migrations: a newer release applied online migrations this binary does not know; working beside them",
			"unknown", strings.Join(unknown, ", "), "known", len(m.migrations))
		return nil
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%w: schema %s has version %s applied, this binary knows 1 to %d",
			ErrUnknownVersion, m.schema, strings.Join(unknown, ", "), len(m.migrations))
	}
	return nil
}

// pending returns the known migrations not yet applied, in order.
func (m *Migrator) pending(applied map[int]appliedRow) []migration {
	var pending []migration
	for _, mig := range m.migrations {
		if _, ok := applied[mig.version]; !ok {
			pending = append(pending, mig)
		}
	}
	return pending
}

// apply runs one up migration in its own transaction on conn. An online
// step waits at most lockWait for each lock and is tried again, up to
// five times, when that wait times out (lock_not_available): its brief
// exclusive lock must not queue every writer of the table behind a long
// transaction.
func (m *Migrator) apply(ctx context.Context, conn *pgx.Conn, mig migration) error {
	const attempts = 5
	for attempt := 1; ; attempt++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if mig.online && m.lockWait > 0 {
				if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", fmt.Sprintf("%dms", m.lockWait.Milliseconds())); err != nil {
					return fmt.Errorf("set lock_timeout: %w", err)
				}
			}
			return m.up(ctx, tx, mig)
		})
		var pgErr *pgconn.PgError
		if err == nil || !mig.online || m.lockWait == 0 || attempt == attempts ||
			!errors.As(err, &pgErr) || pgErr.Code != "55P03" {
			return err
		}
		m.logger.Warn("migrations: online step waited too long for a lock, trying again",
			"version", mig.version, "name", mig.name, "lock_timeout", m.lockWait, "attempt", attempt, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(time.Duration(attempt)*m.lockWait, 10*time.Second)):
		}
	}
}

// up runs one up migration in tx with search_path set to the schema, and
// records it.
func (m *Migrator) up(ctx context.Context, tx pgx.Tx, mig migration) error {
	if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+m.ident); err != nil {
		return fmt.Errorf("set search_path: %w", err)
	}
	if _, err := tx.Exec(ctx, mig.up); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+m.table+" (version, name, online) VALUES ($1, $2, $3)", mig.version, mig.name, mig.online); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

// down runs one down migration in tx with search_path set to the schema,
// and removes its record.
func (m *Migrator) down(ctx context.Context, tx pgx.Tx, mig migration) error {
	if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+m.ident); err != nil {
		return fmt.Errorf("set search_path: %w", err)
	}
	if _, err := tx.Exec(ctx, mig.down); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "DELETE FROM "+m.table+" WHERE version = $1", mig.version); err != nil {
		return fmt.Errorf("unrecord: %w", err)
	}
	return nil
}

// record appends a finished (or, in a dry run, planned) step to res and
// logs it.
func (m *Migrator) record(res *Result, mig migration, began time.Time) {
	step := Step{Version: mig.version, Name: mig.name, Online: mig.online}
	var msg string
	switch {
	case m.dryRun && res.Direction == Down:
		msg = "migrations: would revert"
	case m.dryRun:
		msg = "migrations: would apply"
	case res.Direction == Down:
		msg = "migrations: reverted"
	default:
		msg = "migrations: applied"
	}
	if !m.dryRun {
		step.Duration = time.Since(began)
	}
	res.Steps = append(res.Steps, step)
	m.logger.Info(msg, "version", mig.version, "name", mig.name, "online", mig.online, "elapsed", step.Duration)
}

func sortedVersions(applied map[int]appliedRow) []int {
	versions := make([]int, 0, len(applied))
	for v := range applied {
		versions = append(versions, v)
	}
	sort.Ints(versions)
	return versions
}
