package migrations

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

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
	if mig.noTx {
		return m.outside(ctx, conn, mig, Up)
	}
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
// records it. A no-transaction migration runs here (MigrateTx) without its
// CONCURRENTLY: inside the caller's transaction, the index is built holding
// a SHARE lock on its table until that transaction ends.
func (m *Migrator) up(ctx context.Context, tx pgx.Tx, mig migration) error {
	if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+m.ident); err != nil {
		return fmt.Errorf("set search_path: %w", err)
	}
	sql := mig.up
	if mig.noTx {
		if err := m.dropInvalidIndex(ctx, tx, mig, false); err != nil {
			return err
		}
		sql = concurrentlyRE.ReplaceAllLiteralString(sql, "")
	}
	if _, err := tx.Exec(ctx, sql); err != nil {
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

// outside runs a no-transaction migration's statement in direction dir on
// conn, with no transaction around it, then records (or, down, unrecords)
// it. The statement's IF NOT EXISTS / IF EXISTS make a run after a crash
// between the two a no-op; an invalid index left by a failed CREATE INDEX
// CONCURRENTLY (it failed or was cancelled half-way) is dropped first. No
// lock_timeout is set: CONCURRENTLY waits for the transactions already
// writing the table, without blocking the writers that come after.
func (m *Migrator) outside(ctx context.Context, conn *pgx.Conn, mig migration, dir Direction) (err error) {
	if _, err := conn.Exec(ctx, "SET search_path TO "+m.ident); err != nil {
		return fmt.Errorf("set search_path: %w", err)
	}
	defer func() {
		// RESET: back to the connection's own search_path, for the pool.
		resetCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, rerr := conn.Exec(resetCtx, "RESET search_path"); rerr != nil && err == nil {
			err = fmt.Errorf("reset search_path: %w", rerr)
		}
	}()
	sql, record, args := mig.up, "INSERT INTO "+m.table+" (version, name, online) VALUES ($1, $2, $3)", []any{mig.version, mig.name, mig.online}
	if dir == Down {
		sql, record, args = mig.down, "DELETE FROM "+m.table+" WHERE version = $1", []any{mig.version}
	} else if err := m.dropInvalidIndex(ctx, conn, mig, true); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, sql); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, record, args...); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	return nil
}

// dropInvalidIndex drops the index mig builds if a failed build left it
// invalid (PostgreSQL keeps an interrupted CREATE INDEX CONCURRENTLY's index,
// unused but maintained, and IF NOT EXISTS would keep it for ever).
func (m *Migrator) dropInvalidIndex(ctx context.Context, q querier, mig migration, concurrently bool) error {
	if mig.index == "" {
		return nil
	}
	var invalid bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND NOT i.indisvalid)`, m.schema, mig.index).Scan(&invalid); err != nil {
		return fmt.Errorf("look up index %s: %w", mig.index, err)
	}
	if !invalid {
		return nil
	}
	m.logger.Warn("migrations: dropping the invalid index a failed build left, to build it again",
		"version", mig.version, "name", mig.name, "index", mig.index)
	drop := "DROP INDEX "
	if concurrently {
		drop += "CONCURRENTLY "
	}
	if _, err := q.Exec(ctx, drop+"IF EXISTS "+pgx.Identifier{m.schema, mig.index}.Sanitize()); err != nil {
		return fmt.Errorf("drop invalid index %s: %w", mig.index, err)
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
