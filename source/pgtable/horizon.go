package pgtable

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file watches the snapshot horizon. The readers see only rows of
// transactions older than the oldest transaction still running (see the
// package documentation), so one transaction left open — an idle session
// in a transaction, a long batch job, a forgotten prepared transaction, in
// any database of the cluster — stops the delivery of every row committed
// after it began, for as long as it stays open. Nothing fails: the lag in
// seconds grows, and the source names the transaction.

// Blocker is a transaction that holds back the snapshot horizon while
// committed events wait behind it: the oldest transaction of the cluster
// that has an id, older than Config.HorizonWarnAfter.
type Blocker struct {
	// PID is the backend's process id (pg_stat_activity.pid), for
	// pg_terminate_backend; 0 for a prepared transaction.
	PID int `json:"pid"`
	// Prepared is the gid of a prepared transaction (PREPARE TRANSACTION),
	// for COMMIT PREPARED or ROLLBACK PREPARED; empty otherwise.
	Prepared string `json:"prepared,omitempty"`
	// Database, User, Application and State describe the session, as
	// pg_stat_activity shows them to the source's role (a role without
	// pg_read_all_stats sees another role's State and Query empty).
	Database    string `json:"database"`
	User        string `json:"user"`
	Application string `json:"application,omitempty"`
	State       string `json:"state,omitempty"`
	// Query is the start of its last statement.
	Query string `json:"query,omitempty"`
	// Age is how long its transaction has been open.
	Age time.Duration `json:"-"`
	// AgeSeconds is Age in seconds.
	AgeSeconds float64 `json:"age_seconds"`
	// Since is when the source first saw events waiting behind it.
	Since time.Time `json:"since"`
}

// DefaultHorizonWarnAfter is Config.HorizonWarnAfter's default.
const DefaultHorizonWarnAfter = 10 * time.Second

// horizonRepeat is how often a Blocker still there is logged again.
const horizonRepeat = time.Minute

// Blocker returns the transaction that holds back the snapshot horizon, as
// last checked (Run checks every LagEvery), and whether there is one.
func (s *Source) Blocker() (Blocker, bool) {
	s.lagMu.Lock()
	defer s.lagMu.Unlock()
	return s.blocker, s.blocked
}

// horizonSQL builds the statements of checkHorizon.
func (c *config) horizonSQL() (held, oldest string) {
	k := c.cols
	// Committed rows a read cannot see yet: those of transactions at or
	// after the horizon. One index range per partition.
	held = fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE %s >= pg_snapshot_xmin(pg_current_snapshot()))`, c.table, k.txid)
	if c.Partitions > 1 {
		held = fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM generate_series(0, %d) p(k) WHERE EXISTS (
	SELECT 1 FROM %s WHERE %s = p.k AND %s >= pg_snapshot_xmin(pg_current_snapshot())))`, c.Partitions-1, c.table, k.part, k.txid)
	}
	// The oldest transaction with an id: the horizon. Prepared
	// transactions count as running ones.
	oldest = `SELECT pid, gid, db, usr, app, st, age_s, q FROM (
	SELECT pid, '' AS gid, coalesce(datname, '') AS db, coalesce(usename, '') AS usr, coalesce(application_name, '') AS app,
		coalesce(state, '') AS st, coalesce(extract(epoch FROM clock_timestamp() - xact_start), 0)::float8 AS age_s,
		coalesce(left(query, 200), '') AS q, age(backend_xid) AS xage
	FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
	UNION ALL
	SELECT 0, gid, database, owner::text, '', 'prepared', extract(epoch FROM clock_timestamp() - prepared)::float8, '', age(transaction)
	FROM pg_prepared_xacts
) x ORDER BY xage DESC LIMIT 1`
	return held, oldest
}

// checkHorizon finds whether committed rows wait behind a transaction open
// for HorizonWarnAfter or longer, records it (Blocker), and logs it when
// it appears, every minute while it stays, and when it ends.
func (s *Source) checkHorizon(ctx context.Context) error {
	held, oldest := s.cfg.horizonSQL()
	var waiting bool
	if err := s.pool.QueryRow(ctx, held).Scan(&waiting); err != nil {
		return fmt.Errorf("pgtable: horizon: %w", err)
	}
	var b Blocker
	found := false
	if waiting {
		var age float64
		err := s.pool.QueryRow(ctx, oldest).Scan(&b.PID, &b.Prepared, &b.Database, &b.User, &b.Application, &b.State, &age, &b.Query)
		switch {
		case err == nil:
			b.Age = time.Duration(age * float64(time.Second))
			b.AgeSeconds = b.Age.Seconds()
			found = b.Age >= s.cfg.HorizonWarnAfter
		case errors.Is(err, pgx.ErrNoRows): // it ended meanwhile
		default:
			return fmt.Errorf("pgtable: horizon: %w", err)
		}
	}
	now := time.Now()
	s.lagMu.Lock()
	prev, was := s.blocker, s.blocked
	same := was && found && prev.PID == b.PID && prev.Prepared == b.Prepared
	switch {
	case same:
		b.Since = prev.Since
	case found:
		b.Since = now
	}
	s.blocker, s.blocked = b, found
	logNow := found && (!same || now.Sub(s.blockerLogged) >= horizonRepeat)
	if logNow {
		s.blockerLogged = now
	}
	s.lagMu.Unlock()
	switch {
	case logNow:
		s.log.Warn("pgtable: a transaction holds back the snapshot horizon: events committed after it began are not delivered until it ends",
			"pid", b.PID, "prepared", b.Prepared, "database", b.Database, "user", b.User, "application", b.Application,
			"state", b.State, "transaction_age", b.Age.Round(time.Millisecond), "waiting_since", b.Since, "query", b.Query)
	case was && !found:
		s.log.Info("pgtable: the snapshot horizon moves again", "pid", prev.PID, "prepared", prev.Prepared, "held_for", now.Sub(prev.Since).Round(time.Millisecond))
	}
	return nil
}
