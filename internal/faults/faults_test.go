package faults_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pglocal"
	"github.com/inorder/inorder/internal/pgproxy"
	"github.com/inorder/inorder/migrations"
	"github.com/inorder/inorder/projection/projectiontest"
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		os.Exit(workerMain())
	}
	os.Exit(m.Run())
}

// Environment variables of the suite.
const (
	// envSize chooses the size: "small" (default) or "full".
	envSize = "INORDER_FAULTS"
	// envSeed overrides the seed of the workload and the fault schedule.
	envSeed = "INORDER_FAULTS_SEED"
	// envPGLog, if set, is where the private cluster's server log is
	// copied when the test ends (deadlock reports name the statements).
	envPGLog = "INORDER_FAULTS_PGLOG"
)

// size is a run's workload and the faults injected into it.
type size struct {
	payments, versions  int     // the stream: payments × versions events
	duplicates          float64 // extra copies delivered, as a share of the events
	maxBatch            int     // batches hold 1…maxBatch deliveries
	workers, goroutines int     // worker processes, and batches in flight in each
	lostAcks            float64 // share of answers lost on the way back (redelivered)

	kills             int // workers SIGKILLed while they work
	immediate, fast   int // pg_ctl restart -m immediate / -m fast
	terminations      int // backends terminated inside a transaction
	cuts, commitCuts  int // connections cut mid-transaction / after the server committed
	timeout           time.Duration
	stall             time.Duration // longest wait for any progress
	faultsFrom, until float64       // faults fall between these shares of the batches done
}

var sizes = map[string]size{
	"small": {
		payments: 60, versions: 20, duplicates: 0.3, maxBatch: 16, workers: 3, goroutines: 3, lostAcks: 0.02,
		kills: 3, immediate: 1, fast: 1, terminations: 3, cuts: 3, commitCuts: 2,
		timeout: 4 * time.Minute, stall: 90 * time.Second, faultsFrom: 0.05, until: 0.9,
	},
	"full": {
		payments: 2500, versions: 40, duplicates: 0.3, maxBatch: 40, workers: 3, goroutines: 4, lostAcks: 0.01,
		kills: 25, immediate: 4, fast: 4, terminations: 30, cuts: 30, commitCuts: 10,
		timeout: 55 * time.Minute, stall: 3 * time.Minute, faultsFrom: 0.02, until: 0.95,
	},
}

// Fault kinds.
const (
	faultKill      = "kill"
	faultImmediate = "restart-immediate"
	faultFast      = "restart-fast"
	faultTerminate = "terminate"
	faultCut       = "cut"
	faultCommitCut = "commit-cut"
)

type fault struct {
	at   int // inject once this many batches are done
	kind string
}

// schedule spreads the faults of sz at random over the run.
func schedule(rng *rand.Rand, sz size, batches int) []fault {
	var kinds []string
	for kind, n := range map[string]int{faultKill: sz.kills, faultImmediate: sz.immediate, faultFast: sz.fast,
		faultTerminate: sz.terminations, faultCut: sz.cuts, faultCommitCut: sz.commitCuts} {
		for range n {
			kinds = append(kinds, kind)
		}
	}
	sort.Strings(kinds) // map order is random; the seed decides
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	lo, hi := int(sz.faultsFrom*float64(batches)), int(sz.until*float64(batches))
	plan := make([]fault, len(kinds))
	for i, k := range kinds {
		plan[i] = fault{at: lo + rng.IntN(max(1, hi-lo)), kind: k}
	}
	slices.SortStableFunc(plan, func(a, b fault) int { return a.at - b.at })
	return plan
}

// TestFaults runs worker processes that deliver a shuffled stream with
// duplicates through Process, against a private PostgreSQL cluster, and
// breaks things while they work: workers SIGKILLed mid-batch, the server
// restarted in immediate and fast mode, backends terminated and connections
// cut mid-transaction, connections cut after the server committed their
// COMMIT. Every batch is delivered until a worker answers it (at least
// once). At the end the read model must equal the in-order fold, the audit
// projection must hold exactly one application of each event, nothing may
// be parked, quarantined, rejected or in conflict, and no Process call may
// have returned an error.
func TestFaults(t *testing.T) {
	sizeName := cmp.Or(os.Getenv(envSize), "small")
	sz, ok := sizes[sizeName]
	if !ok {
		t.Fatalf("%s=%q: want small or full", envSize, sizeName)
	}
	if sizeName == "small" {
		t.Parallel()
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envSeed); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, envSeed)
	}
	t.Logf("size %s, seed %d (%s=%d reproduces the workload and the schedule)", sizeName, seed, envSeed, seed)
	ctx, cancel := context.WithTimeout(context.Background(), sz.timeout)
	defer cancel()
	began := time.Now()

	cluster := startCluster(t, ctx)
	clusterStart := time.Since(began)
	proxy, err := pgproxy.Listen(fmt.Sprintf("127.0.0.1:%d", cluster.Port()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	const schema = "faults"
	adminURL := withParams(t, cluster.URL(), "options", "-c search_path="+schema)
	workerURL := withParams(t, cluster.URL(), "options", "-c search_path="+schema, "application_name", workerApp)
	workerURL = strings.Replace(workerURL, fmt.Sprintf("127.0.0.1:%d", cluster.Port()), proxy.Addr(), 1)
	admin := openPool(t, ctx, adminURL)
	m, err := migrations.New(admin, &migrations.Options{Schema: schema})
	require.NoError(t, err)
	_, err = m.Migrate(ctx)
	require.NoError(t, err)
	setup, err := newProcessor(admin, schema, nil, nil)
	require.NoError(t, err)
	require.NoError(t, setup.Setup(ctx))
	admin.Close()

	// The stream, its deliveries and the fault schedule.
	rng := rand.New(rand.NewPCG(seed, 1))
	events := ledger.Generate(rng, sz.payments, sz.versions)
	deliveries := slices.Clone(events)
	for range int(sz.duplicates * float64(len(events))) {
		deliveries = append(deliveries, events[rng.IntN(len(events))])
	}
	rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	var batches [][]aggregate.Event
	for rest := deliveries; len(rest) > 0; {
		n := min(1+rng.IntN(sz.maxBatch), len(rest))
		batches = append(batches, rest[:n:n])
		rest = rest[n:]
	}
	plan := schedule(rng, sz, len(batches))
	t.Logf("%d events, %d deliveries in %d batches; %d workers × %d in flight; %d faults",
		len(events), len(deliveries), len(batches), sz.workers, sz.goroutines, len(plan))

	b := newBroker(t, seed, batches, sz.goroutines, workerURL, schema, sz.lostAcks)
	for range sz.workers {
		b.start()
	}
	inj := &injector{t: t, b: b, cluster: cluster, proxy: proxy, stall: sz.stall, rng: rand.New(rand.NewPCG(seed, 2))}
	inj.admin = openPool(t, ctx, adminURL)
	for i, f := range plan {
		if !waitFor(ctx, sz.stall, func() bool { n, _ := b.progress(); return n >= f.at }, func() <-chan struct{} { _, c := b.progress(); return c }) {
			inj.stalled(fmt.Sprintf("waiting for %d batches done before fault %d (%s)", f.at, i, f.kind))
		}
		inj.inject(ctx, f.kind)
	}
	if !waitFor(ctx, sz.stall, b.finished, func() <-chan struct{} { _, c := b.progress(); return c }) {
		inj.stalled("waiting for the last batches")
	}
	stopCtx, stopCancel := context.WithTimeout(ctx, time.Minute)
	defer stopCancel()
	require.NoError(t, b.stop(stopCtx))
	inj.admin.Close()
	work := time.Since(began)

	st := b.stats()
	ps := proxy.Stats()
	t.Logf("faults: %d workers killed, %d immediate and %d fast restarts (%v), %d backends terminated, %d connections cut mid-transaction, %d cut at COMMIT",
		inj.kills, inj.immediate, inj.fast, inj.restartTimes, inj.terminated, ps.Cuts, ps.CommitCuts)
	t.Logf("deliveries: %d batches sent, %d redelivered (%d lost acks), %d answers; outcomes %v",
		st.Sent, st.Redelivered, st.LostAcks, st.Answers, st.Outcomes)
	var slowest []string
	for _, r := range st.Slowest {
		slowest = append(slowest, fmt.Sprintf("%v (%d attempts)", time.Duration(r.Millis)*time.Millisecond, r.Attempts))
	}
	t.Logf("Process: %d calls retried (%d transactions for %d answers), slowest calls %s; %d connections through the proxy",
		st.Retried, st.Attempts, st.Answers, strings.Join(slowest, ", "), ps.Conns)
	t.Logf("failures retried by Process (from the workers' logs), by kind:\n%s", strings.Join(b.retriedKinds(), "\n"))
	t.Logf("wall time %v, of which the cluster's start %v", work.Round(time.Millisecond), clusterStart.Round(time.Millisecond))
	errs := b.errors()
	require.Empty(t, errs, "%d errors surfaced to the caller", len(errs))
	// Faults cut, kill and restart; they never order locks. A deadlock is the
	// gate's lock order broken (see projection's txMode).
	require.Zero(t, b.retriedWith("SQLSTATE 40P01"), "deadlocks the workers retried (%s reports them)", envPGLog)
	require.Equal(t, sz.kills, inj.kills)
	require.Equal(t, sz.immediate, inj.immediate)
	require.Equal(t, sz.fast, inj.fast)
	require.Equal(t, sz.terminations, inj.terminated)
	require.GreaterOrEqual(t, ps.Cuts, int64(sz.cuts))
	require.EqualValues(t, sz.commitCuts, ps.CommitCuts)

	// The verdict, on a fresh pool.
	verify := openPool(t, ctx, adminURL)
	want, err := ledger.Fold(events)
	require.NoError(t, err)
	got, err := ledger.New(nil).Load(ctx, verify)
	require.NoError(t, err)
	require.Equal(t, want, got, "the read model equals the in-order fold")
	requireAuditOnce(t, ctx, verify, events)
	proc, err := newProcessor(verify, schema, nil, nil)
	require.NoError(t, err)
	projectiontest.RequireSettled(t, proc, events)
}

// requireAuditOnce requires the audit table to hold exactly one row per
// event: none missing, none twice, nothing else.
func requireAuditOnce(t *testing.T, ctx context.Context, pool *pgxpool.Pool, events []aggregate.Event) {
	t.Helper()
	type key struct {
		agg string
		v   int64
		id  string
	}
	rows, err := pool.Query(ctx, `SELECT aggregate, version, event_id, count(*) FROM audit GROUP BY 1, 2, 3`)
	require.NoError(t, err)
	got := map[key]int{}
	var total int
	for rows.Next() {
		var k key
		var n int
		require.NoError(t, rows.Scan(&k.agg, &k.v, &k.id, &n))
		got[k] = n
		total += n
	}
	require.NoError(t, rows.Err())
	var twice, missing []string
	for _, e := range events {
		k := key{e.Aggregate, e.Version, e.StableID()}
		switch n := got[k]; {
		case n == 0:
			missing = append(missing, fmt.Sprintf("%s v%d", e.Aggregate, e.Version))
		case n > 1:
			twice = append(twice, fmt.Sprintf("%s v%d ×%d", e.Aggregate, e.Version, n))
		}
		delete(got, k)
	}
	require.Empty(t, twice, "events applied more than once")
	require.Empty(t, missing, "events never applied")
	require.Empty(t, got, "applications of events not in the stream")
	require.Equal(t, len(events), total)
}

// injector injects faults and counts them.
type injector struct {
	t       *testing.T
	b       *broker
	cluster *pglocal.Cluster
	proxy   *pgproxy.Proxy
	admin   *pgxpool.Pool
	stall   time.Duration
	rng     *rand.Rand

	kills, immediate, fast, terminated int
	restartTimes                       []time.Duration
}

func (in *injector) inject(ctx context.Context, kind string) {
	t := in.t
	switch kind {
	case faultKill:
		var w *worker
		waitFor(ctx, in.stall, func() bool { w = in.b.busyWorker(); return w != nil }, in.proxy.Activity)
		if w == nil {
			in.stalled("no worker busy to kill")
		}
		require.NoError(t, in.b.kill(w))
		in.kills++
	case faultImmediate, faultFast:
		mode := strings.TrimPrefix(kind, "restart-")
		began := time.Now()
		require.NoError(t, in.cluster.Restart(ctx, mode))
		in.restartTimes = append(in.restartTimes, time.Since(began).Round(time.Millisecond))
		if mode == "immediate" {
			in.immediate++
		} else {
			in.fast++
		}
	case faultTerminate:
		// A backend of a worker inside a transaction; the admin pool may
		// itself have lost its connections to a restart: then try again.
		var n int
		waitFor(ctx, in.stall, func() bool {
			err := in.admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM (
  SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND xact_start IS NOT NULL ORDER BY random() LIMIT 1) s`,
				workerApp).Scan(&n)
			return err == nil && n > 0
		}, in.proxy.Activity)
		if n == 0 {
			in.stalled("no worker backend inside a transaction to terminate")
		}
		in.terminated += n
	case faultCut:
		var n int
		waitFor(ctx, in.stall, func() bool { n = in.proxy.Cut(pgproxy.InTransaction, 1+in.rng.IntN(2)); return n > 0 }, in.proxy.Activity)
		if n == 0 {
			in.stalled("no connection inside a transaction to cut")
		}
	case faultCommitCut:
		before := in.proxy.Stats().CommitCuts
		in.proxy.CutAtCommit(1)
		if !waitFor(ctx, in.stall, func() bool { return in.proxy.Stats().CommitCuts > before }, in.proxy.Activity) {
			in.stalled("no COMMIT to cut")
		}
	default:
		t.Fatalf("unknown fault %q", kind)
	}
}

// stalled fails the test with what the workers and the server said.
func (in *injector) stalled(what string) {
	in.t.Helper()
	n, _ := in.b.progress()
	var sb strings.Builder
	in.b.mu.Lock()
	for _, w := range in.b.workers {
		fmt.Fprintf(&sb, "--- worker %d (killed %t, dead %t, in flight %d) stderr tail:\n%s\n", w.id, w.killed, w.dead, len(w.inflight), lastLines(w.stderr.String(), 20))
	}
	in.b.mu.Unlock()
	log, _ := os.ReadFile(in.cluster.LogPath())
	in.t.Fatalf("no progress for %v %s (%d of %d batches done); errors %v\n%s--- server log tail:\n%s",
		in.stall, what, n, len(in.b.lines), in.b.errors(), sb.String(), lastLines(string(log), 30))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// startCluster starts a private cluster in a fresh directory the server's
// unprivileged user can reach (the tests may run as root), stopped and
// removed when the test ends.
func startCluster(t *testing.T, ctx context.Context) *pglocal.Cluster {
	t.Helper()
	if _, err := pglocal.FindBinDir(); err != nil {
		t.Skipf("the fault suite needs the PostgreSQL server binaries for its own cluster: %v", err)
	}
	parent, err := os.MkdirTemp("", "inorder-faults-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(parent, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	began := time.Now()
	c, err := pglocal.Start(ctx, pglocal.Options{Dir: filepath.Join(parent, "pg")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	if keep := os.Getenv(envPGLog); keep != "" {
		t.Cleanup(func() { b, _ := os.ReadFile(c.LogPath()); _ = os.WriteFile(keep, b, 0o644) })
	}
	t.Logf("private cluster on port %d, started in %v", c.Port(), time.Since(began).Round(time.Millisecond))
	return c
}

func openPool(t *testing.T, ctx context.Context, u string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(ctx, u)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// withParams returns u with query parameters set (name, value, …).
func withParams(t *testing.T, u string, kv ...string) string {
	t.Helper()
	p, err := url.Parse(u)
	require.NoError(t, err)
	q := p.Query()
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	p.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	return p.String()
}
