package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
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
	noTx     bool   // runs outside a transaction (the no-transaction directive)
	index    string // for a CREATE INDEX CONCURRENTLY: the index's name
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
				revert := func() error { return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return m.down(ctx, tx, mig) }) }
				if mig.noTx {
					revert = func() error { return m.outside(ctx, conn, mig, Down) }
				}
				if err := revert(); err != nil {
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
