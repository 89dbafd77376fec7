package projection_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/internal/streamtest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/projection/projectiontest"
)

// The contention workload: a few aggregates with many versions, fully
// shuffled with duplicates, delivered in small batches by many goroutines
// in this process and in several OS processes at once — every batch
// competes with every other for the same version rows. INORDER_CONTENTION
// =full runs the size of the hardening issue (20 aggregates × 200
// versions, 64 goroutines here and 3 processes × 16); the default is a
// smaller run for CI.
func contentionSize() (aggregates, versions, goroutines, procs, procGoroutines int) {
	if os.Getenv("INORDER_CONTENTION") == "full" {
		return 20, 200, 64, 3, 16
	}
	return 20, 40, 32, 3, 8
}

// contentionP99 is the bound on a Process call's p99 latency under the
// contention workload: the hardening issue's 2 s, or more when the race
// detector slows the client several times over.
func contentionP99() time.Duration {
	if v := os.Getenv("INORDER_CONTENTION_P99"); v != "" {
		d, err := time.ParseDuration(v)
		if err == nil {
			return d
		}
	}
	if raceEnabled {
		return 10 * time.Second
	}
	return 2 * time.Second
}

// contentionDeliveries returns the workload's events and the batches one
// deliverer (this process, or helper process w) sends: the whole stream,
// shuffled, a quarter of it again, in batches of 1…20.
func contentionDeliveries(seed uint64, worker int) (events []aggregate.Event, work [][]aggregate.Event) {
	aggregates, versions, _, _, _ := contentionSize()
	events, deliveries := streamDeliveries(seed, aggregates, versions)
	rng := rand.New(rand.NewPCG(seed, uint64(worker)+7))
	rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	return events, streamtest.Batches(rng, deliveries, 20)
}

// deadlockCounter is a slog handler that counts the processor's retries of
// deadlocks (SQLSTATE 40P01), which the lock order must make impossible.
type deadlockCounter struct{ n atomic.Int64 }

func (h *deadlockCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *deadlockCounter) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
				h.n.Add(1)
			}
		}
		return true
	})
	return nil
}
func (h *deadlockCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *deadlockCounter) WithGroup(string) slog.Handler      { return h }

// contentionReport is what a deliverer measured.
type contentionReport struct {
	Latencies []time.Duration // of every Process call
	Deadlocks int64           // deadlock retries the processor logged
	Errors    []string
}

// contend delivers work from goroutines and measures every Process call.
func contend(ctx context.Context, proc *projection.Processor, work [][]aggregate.Event, goroutines int, deadlocks *deadlockCounter) contentionReport {
	var mu sync.Mutex
	var rep contentionReport
	err := projectiontest.Deliver(ctx, work, goroutines, func(ctx context.Context, b []aggregate.Event) error {
		began := time.Now()
		_, err := proc.Process(ctx, projection.Batch{Events: b})
		took := time.Since(began)
		mu.Lock()
		defer mu.Unlock()
		rep.Latencies = append(rep.Latencies, took)
		if err != nil {
			rep.Errors = append(rep.Errors, err.Error())
		}
		return nil
	})
	if err != nil {
		rep.Errors = append(rep.Errors, err.Error())
	}
	rep.Deadlocks = deadlocks.n.Load()
	return rep
}

// TestContention delivers the contention workload from goroutines here and
// in helper processes at once: no Process call fails, the processors never
// meet a deadlock (nor does PostgreSQL count one), the p99 latency of a
// Process call stays bounded, and the read model is the fold.
//
// It runs twice: with the ledger alone (an inline projection), and with the
// ledger after an event-sourced tally whose handler writes rows that every
// aggregate shares — the mix in which an inline projection's rows must
// still be locked in the global order (see txMode).
func TestContention(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"contend", "contend-tallied"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testContention(t, mode)
		})
	}
}

func testContention(t *testing.T, mode string) {
	const seed = 21
	aggregates, versions, goroutines, procs, procGoroutines := contentionSize()
	deadlocks := &deadlockCounter{}
	cfg := &projection.Config{Logger: slog.New(deadlocks), RetryBackoff: 5 * time.Millisecond}
	// A database of its own: PostgreSQL counts deadlocks per database, and
	// other tests' handlers may meet some (an event handler that writes
	// rows several aggregates share cannot keep them in one order).
	db := pgtest.NewMigratedAlone(t)
	var more []projection.Projection
	if mode == "contend-tallied" {
		more = append(more, typeTally{})
	}
	b := setupIn(t, db, cfg, nil, more...)
	ctx := t.Context()
	before := pgDeadlocks(t, b)

	helpers := make([]*helperProc, procs)
	for w := range helpers {
		helpers[w] = startHelper(t, mode, b.db, seed, w)
	}
	for _, h := range helpers {
		h.expect(t, "READY")
	}
	events, work := contentionDeliveries(seed, procs)
	began := time.Now()
	for _, h := range helpers {
		h.send(t, "GO")
	}
	reps := []contentionReport{contend(ctx, b.proc, work, goroutines, deadlocks)}
	for _, h := range helpers {
		var rep contentionReport
		require.NoError(t, json.Unmarshal([]byte(h.expect(t, "REPORT")), &rep))
		reps = append(reps, rep)
		h.requireExit(t)
	}
	elapsed := time.Since(began)

	var all []time.Duration
	var errs []string
	var seen int64
	for _, r := range reps {
		all = append(all, r.Latencies...)
		errs = append(errs, r.Errors...)
		seen += r.Deadlocks
	}
	slices.Sort(all)
	pct := func(p float64) time.Duration { return all[min(len(all)-1, int(p*float64(len(all))))] }
	t.Logf("%d aggregates × %d versions; %d goroutines here and %d processes × %d; %d Process calls in %v: p50 %v, p99 %v, max %v",
		aggregates, versions, goroutines, procs, procGoroutines, len(all), elapsed.Round(time.Millisecond),
		pct(0.5).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), all[len(all)-1].Round(time.Millisecond))

	require.Empty(t, errs, "Process calls that failed")
	require.Zero(t, seen, "deadlocks the processors retried")
	b.requireFold(t, events)
	projectiontest.RequireSettled(t, b.proc, events)
	if mode == "contend-tallied" {
		requireTally(t, b, events)
	}
	require.Zero(t, pgDeadlocks(t, b)-before, "deadlocks PostgreSQL counted in the test database")
	require.Less(t, pct(0.99), contentionP99(), "p99 latency of Process")
}

// typeTally is an event-sourced projection that sorts before the ledger: one
// row per application of an event (no unique constraint, so a second
// application would show), and a count per event type — rows that every
// aggregate's events share, upserted in type order as a handler must.
type typeTally struct{}

func (typeTally) Name() string { return "audit" }

func (typeTally) Setup(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS tally_events (aggregate text NOT NULL, version bigint NOT NULL);
CREATE TABLE IF NOT EXISTS tally_types (type text PRIMARY KEY, n bigint NOT NULL)`)
	return err
}

func (typeTally) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE tally_events, tally_types`)
	return err
}

func (typeTally) ApplyBatch(_ context.Context, tx *projection.Tx, events []aggregate.Event) error {
	aggs, vers := make([]string, len(events)), make([]int64, len(events))
	byType := map[string]int64{}
	for i, e := range events {
		aggs[i], vers[i] = e.Aggregate, e.Version
		byType[e.Type]++
	}
	types := slices.Sorted(maps.Keys(byType))
	ns := make([]int64, len(types))
	for i, ty := range types {
		ns[i] = byType[ty]
	}
	tx.Queue(`INSERT INTO tally_events SELECT * FROM unnest($1::text[], $2::bigint[])`, aggs, vers)
	tx.Queue(`INSERT INTO tally_types AS t SELECT * FROM unnest($1::text[], $2::bigint[])
ON CONFLICT (type) DO UPDATE SET n = t.n + EXCLUDED.n`, types, ns)
	return nil
}

// requireTally requires the tally to hold every event once.
func requireTally(t *testing.T, b *bundle, events []aggregate.Event) {
	t.Helper()
	ctx := t.Context()
	var rows, distinct int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT (aggregate, version)) FROM tally_events`).Scan(&rows, &distinct))
	require.Equal(t, len(events), rows, "tally rows: one per event")
	require.Equal(t, len(events), distinct, "tally rows: every event")
	want := map[string]int64{}
	for _, e := range events {
		want[e.Type]++
	}
	got := map[string]int64{}
	rs, err := b.db.Pool.Query(ctx, `SELECT type, n FROM tally_types`)
	require.NoError(t, err)
	for rs.Next() {
		var ty string
		var n int64
		require.NoError(t, rs.Scan(&ty, &n))
		got[ty] = n
	}
	require.NoError(t, rs.Err())
	require.Equal(t, want, got, "tally counts by type")
}

// pgDeadlocks returns the deadlocks PostgreSQL counted in the test database.
// Statistics reach pg_stat_database when a session ends or pauses, so the
// count is read after the workload's sessions ended and flushed them.
func pgDeadlocks(t *testing.T, b *bundle) int64 {
	t.Helper()
	ctx := t.Context()
	b.db.Pool.Reset() // end the pool's sessions: they flush their statistics
	var n int64
	deadline := time.Now().Add(3 * time.Second)
	for {
		_, err := b.db.Pool.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
		require.NoError(t, err)
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n))
		if time.Now().After(deadline) {
			return n
		}
		// A session that deadlocked flushes its count within a second.
		time.Sleep(1100 * time.Millisecond)
		var again int64
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&again))
		if again == n {
			return n
		}
	}
}

// contendHelper is the helper processes' side of TestContention.
func (h *helper) contend(ctx context.Context, deadlocks *deadlockCounter) error {
	_, procGoroutines := contentionGoroutines()
	_, work := contentionDeliveries(h.seed, h.worker)
	h.say("READY", "")
	if err := h.await("GO"); err != nil {
		return err
	}
	rep := contend(ctx, h.proc, work, procGoroutines, deadlocks)
	h.say("REPORT", rep)
	return nil
}

func contentionGoroutines() (here, perProc int) {
	_, _, here, _, perProc = contentionSize()
	return here, perProc
}

// gapTally is the inline ledger with a Gap handler that also counts the gap
// in typeTally's table, under the type given: a row that every aggregate's
// events share.
type gapTally struct {
	noGapLedger
	typ string
}

func (g gapTally) Describe() projection.Description { return projection.Description{Gap: g.gap} }

func (g gapTally) gap(ctx context.Context, tx *projection.Tx, gp projection.Gap) error {
	if err := g.l.Gap(ctx, tx, gp); err != nil {
		return err
	}
	tx.Queue(`INSERT INTO tally_types AS t VALUES ($1, 1) ON CONFLICT (type) DO UPDATE SET n = t.n + 1`, g.typ)
	return nil
}

// TestFastPathLocksInlineRowsFirst pins the order of a speculative batch in
// a processor whose inline projection (the ledger) is not the first: the
// tally before it writes a row every aggregate shares, and an operator's
// gap, which locks the ledger's row and then writes that shared row too,
// comes in between. The batch must take the ledger's row before the tally
// writes the shared one (queuePrelock); taken the other way round, the two
// deadlock.
//
// An outside transaction holds the shared row while the batch comes to
// wait on it and the operator's action after it, then lets go.
func TestFastPathLocksInlineRowsFirst(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigratedAlone(t)
	events := ledger.Generate(rand.New(rand.NewPCG(43, 1)), 1, 3)
	agg, typ := events[0].Aggregate, events[1].Type
	deadlocks := &deadlockCounter{}
	cfg := &projection.Config{Logger: slog.New(deadlocks), RetryBackoff: time.Millisecond}
	l := ledger.New(nil)
	proc := opProcessor(t, db, cfg, typeTally{}, gapTally{noGapLedger{l}, typ})
	b := &bundle{db: db, proc: proc, ledger: l}
	_, err := proc.Process(ctx, projection.Batch{Events: events[:1]})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `INSERT INTO tally_types VALUES ($1, 0) ON CONFLICT DO NOTHING`, typ)
	require.NoError(t, err)
	before := pgDeadlocks(t, b)

	hold, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback(ctx) }()
	_, err = hold.Exec(ctx, `SELECT 1 FROM tally_types WHERE type = $1 FOR UPDATE`, typ)
	require.NoError(t, err)
	waiting := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool {
			var w int
			err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&w)
			return err == nil && w >= n
		}, 10*time.Second, 5*time.Millisecond)
	}

	// A processor that has not met the aggregate speculates on version 2.
	batch := make(chan error, 1)
	fresh := opProcessor(t, db, cfg, typeTally{}, gapTally{noGapLedger{ledger.New(nil)}, typ})
	go func() {
		_, err := fresh.Process(ctx, projection.Batch{Events: events[1:2]})
		batch <- err
	}()
	waiting(1)
	gap := make(chan error, 1)
	go func() {
		gap <- acted(proc.DeclareGap(ctx, "ledger", agg, 5, &projection.ActionOptions{Reason: "lost"}))
	}()
	waiting(2)
	require.NoError(t, hold.Commit(ctx))
	require.NoError(t, <-batch)
	require.NoError(t, <-gap)

	require.Zero(t, deadlocks.n.Load(), "deadlocks retried")
	require.Zero(t, pgDeadlocks(t, b)-before, "deadlocks PostgreSQL counted")
	v, err := proc.Version(ctx, "ledger", agg)
	require.NoError(t, err)
	require.Equal(t, int64(5), v)
}
