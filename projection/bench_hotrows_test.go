package projection_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/buffer"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

var (
	hotRounds     = flag.Int("hotrows.rounds", 5, "BenchmarkHotRows: interleaved rounds of every variant")
	hotAggregates = flag.Int("hotrows.aggregates", 10000, "BenchmarkHotRows: aggregates of the stream (of 5 versions each)")
	hotOnly       = flag.String("hotrows.only", "", "BenchmarkHotRows: run only the variants whose names match this regular expression (setbased always runs)")
)

// hotBenchVersions is the versions per aggregate of BenchmarkHotRows.
const hotBenchVersions = 5

// hotVariant is one variant of BenchmarkHotRows.
type hotVariant struct {
	name        string
	kind        string // setbased, unordered (set-based, natural UPDATE), copy, gate-rows, gate-inline
	workers     int
	partitioned bool
	exclusive   bool // the batches say so (projection.Batch.Exclusive)
	owner       bool // projection.Config.Owner
	foldEvery   int64
	deliveries  []aggregate.Event
}

// BenchmarkHotRows is the second workload of the gate's benchmarks, unlike
// the ledger: cheap per event, one row per aggregate (hr_aggs) plus
// additive updates of 500 shared hot rows (hr_hot) with a Zipf-like key
// distribution (hotRows). 50,000 events in batches of 1000. Every variant
// runs once per round, the variants' order rotated from round to round;
// every run uses a fresh schema, starts after a CHECKPOINT and fails unless
// the read model equals the in-order fold (copy: unless every event was
// copied). The table at the end has the medians of events/s and of the
// per-round ratios:
//
//   - setbased: the hand-written set-based consumer, the projection's own
//     handler (projection.Apply) in one transaction per batch, in order, no
//     gate; -partitioned: 4 workers partitioned by aggregate;
//     unordered-partitioned: the same with the natural statement on the hot
//     rows (UPDATE … FROM unnest, keys in map order) instead of
//     projection.Sums: it deadlocks (each costs deadlock_timeout);
//
//   - copy: COPY of the batch's events into a table keyed by (aggregate,
//     version): the physical ceiling;
//
//   - the bounds, as BenchmarkLedger's (see benchKindFloor and the kinds
//     after it): setbased+version-rows, the handler plus each aggregate's
//     version row; setbased+inline, the inline fast path's own statements
//     (the upsert with its log, the new aggregates' version rows);
//     setbased+parking+state, any gate that parks durably with its state in
//     tables (shuffled, 1 connection; -jittered-partitioned: the jittered
//     stream, 4 partitioned), decisions taken in memory;
//     setbased+inline-unguarded, the same without the guard (a fenced
//     owner's), setbased+inline-advisory with advisory locks instead
//     (bench_guard_test.go; -partitioned: 4 workers, as
//     setbased+inline-partitioned); setbased+marks, a fenced owner's marks of whole batches folded into
//     version rows at the end (-fold8: every 8 batches), and
//     setbased+parking+marks, the same with parking (bench_marks_test.go);
//
//   - gate-rows-*: the gate with version rows (the general path);
//     gate-inline-*: the aggregate's row carries the gate's state;
//     -ordered: in order, 1 connection; -partitioned: in order, 4
//     partitioned; -jittered-partitioned: each delivery displaced by up to
//     two batches plus 5% copies, 4 partitioned (-exclusive: the batches
//     declare that their worker is the only one with their aggregates,
//     projection.Batch.Exclusive); -shuffled: the stream shuffled plus 20%
//     redeliveries, 1 connection; -owner: the processor owns the gate key
//     (projection.Config.Owner: no guard rows for new aggregates).
//
//     flock /work/coord/bench.lock go test -run '^$' -bench BenchmarkHotRows -benchtime=1x -v ./projection/ -hotrows.rounds=5
func BenchmarkHotRows(b *testing.B) {
	events := hotGenerate(rand.New(rand.NewPCG(2026, 1)), *hotAggregates, hotBenchVersions)
	shuffled := benchShuffle(rand.New(rand.NewPCG(2026, 2)), events, 0.2)
	jittered := benchJitter(rand.New(rand.NewPCG(2026, 3)), events, 2*benchBatch, 0.05)
	want, err := hotFold(events)
	require.NoError(b, err)

	variants := []hotVariant{
		{name: "setbased", kind: "setbased", workers: 1, deliveries: events},
		{name: "setbased-partitioned", kind: "setbased", workers: 4, partitioned: true, deliveries: events},
		{name: "unordered-partitioned", kind: "unordered", workers: 4, partitioned: true, deliveries: events},
		{name: "copy", kind: "copy", workers: 1, deliveries: events},
		{name: "setbased+version-rows", kind: "setbased-rows", workers: 1, deliveries: events},
		{name: "setbased+inline", kind: "setbased-inline", workers: 1, deliveries: events},
		{name: "setbased+inline-unguarded", kind: "setbased-inline-unguarded", workers: 1, deliveries: events},
		{name: "setbased+inline-advisory", kind: "setbased-inline-advisory", workers: 1, deliveries: events},
		{name: "setbased+inline-advisory-partitioned", kind: "setbased-inline-advisory", workers: 4, partitioned: true, deliveries: events},
		{name: "setbased+inline-partitioned", kind: "setbased-inline", workers: 4, partitioned: true, deliveries: events},
		{name: "setbased+marks", kind: "setbased-marks", workers: 1, deliveries: events},
		{name: "setbased+marks-fold8", kind: "setbased-marks", foldEvery: 8, workers: 1, deliveries: events},
		{name: "setbased+parking+state", kind: "setbased-parking-state", workers: 1, deliveries: shuffled},
		{name: "setbased+parking+state-jittered-partitioned", kind: "setbased-parking-state", workers: 4, partitioned: true, deliveries: jittered},
		{name: "setbased+parking+marks", kind: "setbased-parking-marks", workers: 1, deliveries: shuffled},
		{name: "setbased+parking+marks-jittered-partitioned", kind: "setbased-parking-marks", workers: 4, partitioned: true, deliveries: jittered},
		{name: "gate-rows-ordered", kind: "gate-rows", workers: 1, deliveries: events},
		{name: "gate-inline-ordered", kind: "gate-inline", workers: 1, deliveries: events},
		{name: "gate-inline-partitioned", kind: "gate-inline", workers: 4, partitioned: true, deliveries: events},
		{name: "gate-inline-jittered-partitioned", kind: "gate-inline", workers: 4, partitioned: true, deliveries: jittered},
		{name: "gate-inline-jittered-partitioned-exclusive", kind: "gate-inline", workers: 4, partitioned: true, exclusive: true, deliveries: jittered},
		{name: "gate-inline-jittered-partitioned-exclusive-owner", kind: "gate-inline", workers: 4, partitioned: true, exclusive: true, owner: true, deliveries: jittered},
		{name: "gate-inline-ordered-owner", kind: "gate-inline", workers: 1, owner: true, deliveries: events},
		{name: "gate-inline-shuffled-owner", kind: "gate-inline", workers: 1, owner: true, deliveries: shuffled},
		{name: "gate-rows-shuffled", kind: "gate-rows", workers: 1, deliveries: shuffled},
		{name: "gate-inline-shuffled", kind: "gate-inline", workers: 1, deliveries: shuffled},
	}
	if *hotOnly != "" {
		re := regexp.MustCompile(*hotOnly)
		variants = slices.DeleteFunc(variants, func(v hotVariant) bool { return v.name != "setbased" && !re.MatchString(v.name) })
	}
	eps := map[string][]float64{}     // deliveries per second, per round
	deadlocks := map[string][]int64{} // deadlocks retried, per round
	ratios := map[string][]float64{}  // per-round ratios
	var loads []string
	for range b.N {
		for round := range *hotRounds {
			loads = append(loads, hotLoadAvg())
			for k := range variants {
				v := variants[(k+round)%len(variants)]
				took, dl := hotRun(b, v, want, len(events))
				eps[v.name] = append(eps[v.name], float64(len(v.deliveries))/took.Seconds())
				deadlocks[v.name] = append(deadlocks[v.name], dl)
				b.Logf("round %d %-34s %8.0f events/s  %6.2fs  deadlocks %d", round+1, v.name, float64(len(v.deliveries))/took.Seconds(), took.Seconds(), dl)
			}
			last := func(n string) float64 {
				if len(eps[n]) == 0 {
					return math.NaN()
				}
				return eps[n][len(eps[n])-1]
			}
			unique := func(n string) float64 { // unique events per second
				for _, v := range variants {
					if v.name == n {
						return last(n) * float64(len(events)) / float64(len(v.deliveries))
					}
				}
				return math.NaN()
			}
			for _, r := range []struct {
				name string
				x    float64
			}{
				{"gate-rows-ordered / setbased", last("gate-rows-ordered") / last("setbased")},
				{"gate-inline-ordered / setbased", last("gate-inline-ordered") / last("setbased")},
				{"gate-inline-ordered-owner / setbased", last("gate-inline-ordered-owner") / last("setbased")},
				{"gate-inline-ordered-owner / setbased+inline-unguarded", last("gate-inline-ordered-owner") / last("setbased+inline-unguarded")},
				{"gate-inline-jittered-partitioned-exclusive-owner / setbased-partitioned", last("gate-inline-jittered-partitioned-exclusive-owner") / last("setbased-partitioned")},
				{"gate-inline-shuffled-owner / setbased", last("gate-inline-shuffled-owner") / last("setbased")},
				{"gate-inline-jittered-partitioned / setbased-partitioned", last("gate-inline-jittered-partitioned") / last("setbased-partitioned")},
				{"gate-inline-jittered-partitioned (unique) / setbased-partitioned", unique("gate-inline-jittered-partitioned") / last("setbased-partitioned")},
				{"gate-inline-jittered-partitioned-exclusive / setbased-partitioned", last("gate-inline-jittered-partitioned-exclusive") / last("setbased-partitioned")},
				{"gate-inline-jittered-partitioned-exclusive / setbased+parking+state-jittered-partitioned", last("gate-inline-jittered-partitioned-exclusive") / last("setbased+parking+state-jittered-partitioned")},
				{"gate-inline-jittered-partitioned-exclusive / gate-inline-jittered-partitioned", last("gate-inline-jittered-partitioned-exclusive") / last("gate-inline-jittered-partitioned")},
				{"gate-inline-shuffled / setbased", last("gate-inline-shuffled") / last("setbased")},
				{"gate-inline-shuffled (unique) / setbased", unique("gate-inline-shuffled") / last("setbased")},
				{"gate-inline-shuffled (unique) / copy", unique("gate-inline-shuffled") / last("copy")},
				{"gate-rows-shuffled / setbased", last("gate-rows-shuffled") / last("setbased")},
				{"gate-rows-shuffled (unique) / copy", unique("gate-rows-shuffled") / last("copy")},
				{"gate-inline-partitioned / setbased (1 connection)", last("gate-inline-partitioned") / last("setbased")},
				{"gate-inline-partitioned / setbased-partitioned", last("gate-inline-partitioned") / last("setbased-partitioned")},
				{"setbased-partitioned / setbased", last("setbased-partitioned") / last("setbased")},
				{"unordered-partitioned / setbased", last("unordered-partitioned") / last("setbased")},
				{"copy / setbased", last("copy") / last("setbased")},
				{"setbased+version-rows / setbased", last("setbased+version-rows") / last("setbased")},
				{"setbased+marks / setbased", last("setbased+marks") / last("setbased")},
				{"setbased+marks-fold8 / setbased", last("setbased+marks-fold8") / last("setbased")},
				{"gate-rows-ordered / setbased+version-rows", last("gate-rows-ordered") / last("setbased+version-rows")},
				{"setbased+inline / setbased", last("setbased+inline") / last("setbased")},
				{"setbased+inline-unguarded / setbased", last("setbased+inline-unguarded") / last("setbased")},
				{"setbased+inline-advisory / setbased", last("setbased+inline-advisory") / last("setbased")},
				{"setbased+inline-advisory-partitioned / setbased-partitioned", last("setbased+inline-advisory-partitioned") / last("setbased-partitioned")},
				{"setbased+inline-partitioned / setbased-partitioned", last("setbased+inline-partitioned") / last("setbased-partitioned")},
				{"setbased+parking+state / setbased", last("setbased+parking+state") / last("setbased")},
				{"setbased+parking+marks / setbased", last("setbased+parking+marks") / last("setbased")},
				{"setbased+parking+marks-jittered-partitioned / setbased-partitioned", last("setbased+parking+marks-jittered-partitioned") / last("setbased-partitioned")},
				{"setbased+parking+marks (unique) / copy", unique("setbased+parking+marks") / last("copy")},
				{"gate-rows-shuffled / setbased+parking+state", last("gate-rows-shuffled") / last("setbased+parking+state")},
				{"gate-inline-shuffled / setbased+parking+state", last("gate-inline-shuffled") / last("setbased+parking+state")},
				{"setbased+parking+state-jittered-partitioned / setbased-partitioned", last("setbased+parking+state-jittered-partitioned") / last("setbased-partitioned")},
				{"gate-inline-jittered-partitioned / setbased+parking+state-jittered-partitioned", last("gate-inline-jittered-partitioned") / last("setbased+parking+state-jittered-partitioned")},
				{"gate-inline-ordered / setbased+inline", last("gate-inline-ordered") / last("setbased+inline")},
			} {
				ratios[r.name] = append(ratios[r.name], r.x)
			}
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\nBenchmarkHotRows: %d rounds, load averages at each round's start: %s\n", len(loads), strings.Join(loads, " / "))
	fmt.Fprintf(&out, "| variant | events/s (median) | per round | deadlocks per run |\n|---|---:|---|---|\n")
	for _, v := range variants {
		fmt.Fprintf(&out, "| %s | %.0f | %s | %v |\n", v.name, benchMedian(eps[v.name]), hotJoin(eps[v.name], "%.0f"), deadlocks[v.name])
	}
	fmt.Fprintf(&out, "\n| ratio | median of the per-round ratios | per round |\n|---|---:|---|\n")
	names := make([]string, 0, len(ratios))
	for n := range ratios {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if math.IsNaN(ratios[n][0]) {
			continue
		}
		fmt.Fprintf(&out, "| %s | %.3f | %s |\n", n, benchMedian(ratios[n]), hotJoin(ratios[n], "%.2f"))
	}
	b.Log(out.String())
	b.ReportMetric(benchMedian(ratios["gate-inline-ordered / setbased"]), "inline-ordered-ratio")
}

func hotJoin(xs []float64, format string) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(s, " / ")
}

// hotLoadAvg returns the machine's 1-minute load average.
func hotLoadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(data))[0]
}

// hotRun runs one variant on a fresh schema and returns its time and the
// deadlocks retried.
func hotRun(b *testing.B, v hotVariant, want *hotModel, unique int) (time.Duration, int64) {
	b.Helper()
	ctx := b.Context()
	db := pgtest.NewMigrated(b)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(b, err)
	cfg.MaxConns = int32(v.workers + 1)
	pids := &benchPIDs{}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		pids.add(c.PgConn().PID())
		return nil
	}
	var logFrom int64
	if *ledgerPGLog != "" {
		cfg.ConnConfig.RuntimeParams["log_min_duration_statement"] = "0"
		cfg.ConnConfig.RuntimeParams["log_parameter_max_length"] = "0"
		st, err := os.Stat(*ledgerPGLog)
		require.NoError(b, err)
		logFrom = st.Size()
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(b, err)
	defer pool.Close()

	h := &hotRows{name: "hot", inline: v.kind == "gate-inline" || strings.HasPrefix(v.kind, "setbased-inline"), unordered: v.kind == "unordered"}
	var proc *projection.Processor
	if strings.HasPrefix(v.kind, "gate") {
		proc, err = projection.New(pool, &projection.Config{Schema: db.Schema, Owner: v.owner}, h)
		require.NoError(b, err)
		defer func() { require.NoError(b, proc.Close(context.Background())) }()
		require.NoError(b, proc.Setup(ctx))
	} else {
		require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := h.Setup(ctx, tx); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `CREATE TABLE hr_copy (id text NOT NULL, version bigint NOT NULL, data jsonb NOT NULL, PRIMARY KEY (id, version));
CREATE TABLE hr_versions (aggregate text PRIMARY KEY, version bigint NOT NULL, log bytea NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
`+benchFloorStateDDL+";\n"+benchMarksDDL)
			return err
		}))
	}
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		b.Logf("no checkpoint before the run: %v", err)
	}
	var retried atomic.Int64
	buf := buffer.New(db.Schema)
	parked := &benchParkState{applied: map[string]int64{}, parked: map[string]map[int64]aggregate.Event{}}
	marks := &benchMarks{projection: h.name, foldEvery: v.foldEvery}
	began := time.Now()
	err = benchFanOut(ctx, v.deliveries, benchBatch, v.workers, v.partitioned, func(ctx context.Context, es []aggregate.Event) error {
		switch v.kind {
		case "setbased", "unordered", "setbased-rows":
			for {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if err := projection.Apply(ctx, tx, h, es...); err != nil || v.kind != "setbased-rows" {
						return err
					}
					// The least the general path adds: each aggregate's
					// version row, with a 16-byte log entry per version.
					sorted, _ := benchInOrder(es)
					aggs, vers, logs := benchLogEntries(sorted)
					_, err := tx.Exec(ctx, `INSERT INTO hr_versions AS v (aggregate, version, log)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bytea[])
ON CONFLICT (aggregate) DO UPDATE SET version = EXCLUDED.version, log = v.log || EXCLUDED.log, updated_at = now()`, aggs, vers, logs)
					return err
				})
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
					retried.Add(1)
					continue
				}
				return err
			}
		case "setbased-inline":
			return hotInlineApply(ctx, pool, h, es, guardRows)
		case "setbased-inline-unguarded":
			return hotInlineApply(ctx, pool, h, es, guardNone)
		case "setbased-inline-advisory":
			return hotInlineApply(ctx, pool, h, es, guardAdvisory)
		case "setbased-marks":
			events, _ := benchInOrder(es)
			if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				t := projection.NewTx(tx)
				if err := h.ApplyBatch(ctx, t, events); err != nil {
					return err
				}
				projection.Finish(t)
				marks.queue(t, events)
				return t.Flush(ctx)
			}); err != nil {
				return err
			}
			return marks.committed(ctx, pool)
		case "setbased-parking-state":
			return benchParkApply(ctx, pool, buf, h, parked, es, true, nil)
		case "setbased-parking-marks":
			if err := benchParkApply(ctx, pool, buf, h, parked, es, false, marks); err != nil {
				return err
			}
			return marks.committed(ctx, pool)
		case "copy":
			rows := make([][]any, len(es))
			for i, e := range es {
				rows[i] = []any{e.Aggregate, e.Version, string(e.Data)}
			}
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				_, err := tx.CopyFrom(ctx, pgx.Identifier{"hr_copy"}, []string{"id", "version", "data"}, pgx.CopyFromRows(rows))
				return err
			})
		default:
			_, err := proc.Process(ctx, projection.Batch{Events: es, Source: "bench", Exclusive: v.exclusive})
			return err
		}
	})
	if err == nil && (v.kind == "setbased-marks" || v.kind == "setbased-parking-marks") {
		err = marks.fold(ctx, pool) // what is left, as an owner handing over
	}
	took := time.Since(began)
	require.NoError(b, err, v.name)
	if v.kind == "setbased-marks" || v.kind == "setbased-parking-marks" {
		var n, sum int64
		require.NoError(b, pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(version), 0) FROM floor_mark_versions`).Scan(&n, &sum))
		require.Equal(b, [2]int64{int64(*hotAggregates), int64(*hotAggregates * hotBenchVersions)}, [2]int64{n, sum}, "%s: folded versions", v.name)
	}
	if *ledgerPGLog != "" {
		b.Logf("%s: server time per statement\n%s", v.name, benchStatementReport(b, *ledgerPGLog, logFrom, pids.set(), took, v.workers))
	}
	if v.kind == "copy" {
		var n int
		require.NoError(b, pool.QueryRow(ctx, `SELECT count(*) FROM hr_copy`).Scan(&n))
		require.Equal(b, unique, n, v.name)
		return took, 0
	}
	got, err := hotLoad(ctx, pool)
	require.NoError(b, err)
	require.Equal(b, want, got, "%s: the read model is not the in-order fold", v.name)
	if proc != nil {
		return took, proc.Counts()["hot"].Deadlocks
	}
	return took, retried.Load()
}

// hotInlineApply is the bound of the inline fast path on this workload, as
// benchInlineApply is on the ledger's: the handler called directly with its
// runs' log entries (the upsert carrying InlineTable.Condition and SetLog),
// and, in the same pipeline, one insert of the empty version rows of the
// aggregates that start at version 1 (the fast path's guard of new
// aggregates). No validation, no plan, no outcome: a bound on the gate, not
// a gate; correct only for in-order, partitioned delivery. Unguarded, it
// leaves the new aggregates' version rows out: the bound of a fenced owner,
// which needs no guard against a concurrent creator of the same aggregate.
func hotInlineApply(ctx context.Context, pool *pgxpool.Pool, h *hotRows, chunk []aggregate.Event, guard benchGuard) error {
	events, fresh := benchInOrder(chunk)
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		t := projection.NewTx(tx)
		queueInlineGuard(t, h.name, fresh, guard)
		projection.SetInlineRuns(t, events)
		if err := h.ApplyBatch(ctx, t, events); err != nil {
			return err
		}
		projection.Finish(t)
		return t.Flush(ctx)
	})
}
