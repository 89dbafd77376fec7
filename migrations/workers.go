package migrations

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// LegacyApplicationName is the application_name inorder's command line set
// on its connections before releases announced their workers (Announce):
// Migrator.Workers counts such a session as a worker of a schema when its
// last statement named one of the schema's tables.
const LegacyApplicationName = "inorder"

// Worker is a database session Migrator.Workers counts as an inorder
// worker of the schema.
type Worker struct {
	// PID is the session's backend process id (pg_stat_activity.pid).
	PID int
	// ApplicationName is the session's application_name.
	ApplicationName string
	// ClientAddr is the client's address; empty for a Unix socket.
	ClientAddr string
	// BackendStart is when the session connected.
	BackendStart time.Time
	// Announced is true for a worker that announced itself (Announce);
	// false for one recognised by LegacyApplicationName.
	Announced bool
}

// String describes the session for an operator.
func (w Worker) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d", w.PID)
	if w.ApplicationName != "" {
		fmt.Fprintf(&b, " %q", w.ApplicationName)
	}
	if w.ClientAddr != "" {
		fmt.Fprintf(&b, " from %s", w.ClientAddr)
	}
	fmt.Fprintf(&b, " since %s", w.BackendStart.UTC().Format(time.RFC3339))
	if !w.Announced {
		b.WriteString(" (an older release's)")
	}
	return b.String()
}

// OfflineError is the error of a Migrate or MigrateTx that refused to
// apply offline migrations while other inorder workers were connected. It
// wraps ErrWorkersConnected. Nothing was applied.
type OfflineError struct {
	// Schema is the schema being migrated.
	Schema string
	// Offline lists the pending migrations that are offline.
	Offline []Step
	// Workers lists the sessions counted as workers of the schema.
	Workers []Worker
}

func (e *OfflineError) Error() string {
	names := make([]string, len(e.Offline))
	for i, s := range e.Offline {
		names[i] = fmt.Sprintf("%03d_%s", s.Version, s.Name)
	}
	workers := make([]string, 0, min(len(e.Workers), 5))
	for i, w := range e.Workers {
		if i == 5 {
			workers = append(workers, fmt.Sprintf("and %d more", len(e.Workers)-5))
			break
		}
		workers = append(workers, w.String())
	}
	verb := "is"
	if len(names) > 1 {
		verb = "are"
	}
	return fmt.Sprintf("migrations: schema %s: refused to apply anything: pending migration %s %s offline and %d inorder worker session(s) are connected (%s); stop those workers and migrate again, or force it (Options.Force, inorder migrate --force) and let them fail or block until it is done",
		e.Schema, strings.Join(names, ", "), verb, len(e.Workers), strings.Join(workers, "; "))
}

// Unwrap returns ErrWorkersConnected.
func (e *OfflineError) Unwrap() error { return ErrWorkersConnected }

// presenceKeys are the two keys of the shared advisory lock an announced
// worker of schema holds.
func presenceKeys(schema string) (int32, int32) {
	h := fnv.New32a()
	_, _ = h.Write([]byte("inorder/workers\x00" + schema))
	return 0x696e6f72, int32(h.Sum32()) // "inor"
}

// Workers returns the sessions, other than the caller's, that are inorder
// workers of the Migrator's schema: those that announced themselves
// (Announce holds a shared advisory lock keyed on the schema), and those of
// older releases, recognised by their application_name
// (LegacyApplicationName) and a last statement naming one of the schema's
// tables. An older release's worker connected under another
// application_name (one its database URL sets) is not seen; nor are other
// roles' statements unless the caller may read them (pg_read_all_stats).
func (m *Migrator) Workers(ctx context.Context) ([]Worker, error) {
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: acquire connection: %w", err)
	}
	defer conn.Release()
	return m.workers(ctx, conn.Conn())
}

func (m *Migrator) workers(ctx context.Context, q querier) ([]Worker, error) {
	k1, k2 := presenceKeys(m.schema)
	rows, err := q.Query(ctx, `SELECT a.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), ''),
       coalesce(a.backend_start, now()), a.pid IN (SELECT l.pid FROM pg_locks l
           WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
             AND l.classid = ($1::int::bigint & 4294967295)::oid AND l.objid = ($2::int::bigint & 4294967295)::oid
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
  AND (a.pid IN (SELECT l.pid FROM pg_locks l
           WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
             AND l.classid = ($1::int::bigint & 4294967295)::oid AND l.objid = ($2::int::bigint & 4294967295)::oid
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
       OR (a.application_name = $3 AND strpos(a.query, $4) > 0))
ORDER BY a.backend_start, a.pid`, k1, k2, LegacyApplicationName, m.ident+".")
	if err != nil {
		return nil, fmt.Errorf("migrations: list workers: %w", err)
	}
	var (
		w   Worker
		out []Worker
	)
	_, err = pgx.ForEachRow(rows, []any{&w.PID, &w.ApplicationName, &w.ClientAddr, &w.BackendStart, &w.Announced}, func() error {
		out = append(out, w)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("migrations: list workers: %w", err)
	}
	return out, nil
}

// refuseOffline returns an *OfflineError when pending holds an offline
// migration, the schema has migrations applied already (a first install
// has no workers to disturb), Force is not set, and other workers are
// connected. A dry run never refuses.
func (m *Migrator) refuseOffline(ctx context.Context, q querier, applied map[int]appliedRow, pending []migration) error {
	if m.force || m.dryRun || len(applied) == 0 {
		return nil
	}
	var offline []Step
	for _, mig := range pending {
		if !mig.online {
			offline = append(offline, Step{Version: mig.version, Name: mig.name})
		}
	}
	if len(offline) == 0 {
		return nil
	}
	workers, err := m.workers(ctx, q)
	if err != nil {
		return err
	}
	if len(workers) == 0 {
		return nil
	}
	m.logger.Warn("migrations: offline migration refused while workers are connected", "offline", len(offline), "workers", len(workers))
	return &OfflineError{Schema: m.schema, Offline: offline, Workers: workers}
}

// Presence is a process's announcement that it runs inorder workers on a
// schema, for Migrator.Workers to see; Announce returns it.
type Presence struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	held   bool
}

// Announce tells migrators that this process runs inorder workers on
// schema (empty means DefaultSchema) until Close: it holds a shared
// advisory lock on a connection of its own, opened with pool's
// configuration, and opens a new one within seconds when that connection is
// lost. A process that migrates and then works announces itself after
// migrating: its own announcement would count against it. logger, if not
// nil, hears about lost connections.
func Announce(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger) (*Presence, error) {
	if pool == nil {
		return nil, errors.New("migrations: pool is required")
	}
	if schema == "" {
		schema = DefaultSchema
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg := pool.Config().ConnConfig
	k1, k2 := presenceKeys(schema)
	connect := func(ctx context.Context) (*pgx.Conn, error) {
		conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
		if err != nil {
			return nil, err
		}
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock_shared($1, $2)", k1, k2); err != nil {
			_ = conn.Close(context.Background())
			return nil, err
		}
		return conn, nil
	}
	conn, err := connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: announce workers of schema %s: %w", schema, err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Presence{cancel: cancel, done: make(chan struct{}), held: true}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				if conn != nil {
					// Unlock before closing: the server releases a closed
					// session's locks only when its backend exits, a
					// moment after the client has gone, and a migrator
					// looking in between would still count this worker.
					uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
					_, _ = conn.Exec(uctx, "SELECT pg_advisory_unlock_shared($1, $2)", k1, k2)
					ucancel()
					_ = conn.Close(context.Background())
				}
				return
			case <-tick.C:
			}
			if conn != nil {
				pctx, pcancel := context.WithTimeout(runCtx, 5*time.Second)
				err := conn.Ping(pctx)
				pcancel()
				if err == nil || runCtx.Err() != nil {
					continue
				}
				logger.Warn("migrations: the workers' announcement lost its connection, reconnecting", "schema", schema, "error", err)
				_ = conn.Close(context.Background())
				conn = nil
				p.setHeld(false)
			}
			cctx, ccancel := context.WithTimeout(runCtx, 5*time.Second)
			c, err := connect(cctx)
			ccancel()
			if err != nil {
				continue
			}
			conn = c
			p.setHeld(true)
		}
	}()
	return p, nil
}

func (p *Presence) setHeld(held bool) {
	p.mu.Lock()
	p.held = held
	p.mu.Unlock()
}

// Held reports whether the announcement's lock is held now (false while
// its connection is being reopened).
func (p *Presence) Held() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// Close withdraws the announcement and closes its connection: once it
// returns, Migrator.Workers no longer sees this process. It is safe to
// call more than once.
func (p *Presence) Close() {
	p.cancel()
	<-p.done
}
