package projection_test

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"reflect"
	"regexp"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/buffer"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/internal/streamtest"
	"github.com/inorder/inorder/projection"
)

var ledgerPGLog = flag.String("ledger.pglog", "",
	"BenchmarkLedger: path of the PostgreSQL server log (the server must be local and log_line_prefix must "+
		"contain [%p]); when set, the benchmark's sessions set log_min_duration_statement=0 and each run logs "+
		"the server time of every statement type")

var ledgerExplain = flag.Duration("ledger.explain", 0,
	"BenchmarkLedger: if positive, the benchmark's sessions load auto_explain (superuser) and the server logs the "+
		"plan of every statement slower than this")

// The BenchmarkLedger workload.
const (
	benchPayments    = 10_000 // aggregates
	benchVersions    = 10     // events per aggregate: 100k events
	benchBatch       = 1_000  // deliveries per Process call, events per set-based transaction
	benchDuplicates  = 0.2    // exact copies added to the shuffled stream, as a share of its events
	benchNaiveSubset = 5_000  // naive runs on the stream's first 5k events (it is ~70× slower)
	benchProjection  = "ledger"
)

// BenchmarkLedger measures the ledger projection on 100k events over 10k
// payments, side by side:
//
//   - naive: one transaction per event, no gate library: lock a version row,
//     read the payment, write legs, payment and balances one statement at a
//     time, bump the version. Runs on the first 5k events of the stream.
//   - setbased: the ledger's set-based handler called directly, 1000 events
//     per transaction in stream order, no gate at all — the hand-written
//     baseline. Needs in-order delivery: with several workers the stream is
//     partitioned by aggregate hash.
//   - setbased+version-rows: setbased plus one upsert of the batch's
//     aggregates' rows into a version table, in the same pipeline: the least
//     a gate keeping a version row per aggregate must write (no read, no
//     lock, no check, no applied log). Not a gate: a bound on one.
//   - setbased+parking: setbased on the shuffled stream (below), one
//     writer, plus the least a gate that parks durably must write: one
//     statement per batch parks the future versions with their payloads
//     (inorder's parked table), one deletes those drained; applied
//     versions, the parked set and drained payloads stay in memory. Not a
//     gate: a bound on one, for the shuffled variants. With 4 workers,
//     partitioned, on the jittered stream: the same bound for the jittered
//     variant (setbased+parking-jittered-partitioned).
//   - setbased+parking+state (and -jittered-partitioned): setbased+parking
//     with the gate's state where issue 13's design keeps it, in tables,
//     touched only for the aggregates that leave the fast path: their state
//     rows and the parked events that drain are read, their state rows
//     written back. A bound on that design.
//   - setbased+inline: the inline ledger's handler called directly on the
//     stream in order, its upsert carrying InlineTable.Condition and the
//     runs' log entries, and the empty state rows of new aggregates: the
//     statements of the inline fast path and nothing else. A bound on it.
//   - inorder-ordered: Processor.Process on batches of 1000 consecutive
//     deliveries of the stream; the workers share one queue of batches, so
//     concurrent batches hold the same aggregates and the gate orders them.
//   - inorder-ordered-partitioned: the same, each worker owning the
//     aggregates of one hash partition (what a keyed broker delivers).
//   - inorder-shuffled: the stream fully shuffled plus 20% exact duplicates
//     at random positions, batches of 1000, shared queue.
//   - inorder-shuffled-partitioned: the shuffled stream, partitioned.
//   - inorder-inline-ordered (-partitioned), inorder-inline-shuffled: the
//     same with the inline ledger (the payment row carries the version:
//     projection.Inline); inorder-inline-jittered-partitioned: the stream
//     with each delivery displaced by up to two batches and 5% copies near
//     their originals (what competing consumers of an ordered stream
//     deliver), partitioned; -exclusive: the same, the batches declaring
//     that their worker is the only one with their aggregates
//     (projection.Batch.Exclusive, as a keyed broker's partitions are);
//     -owner: the processor owns the projection's gate key
//     (projection.Config.Owner: no guard rows for new aggregates).
//   - inorder-ordered+effects, inorder-shuffled+effects: inorder-ordered
//     and inorder-shuffled with one effect intent per event: the ledger's
//     handler also records, in its transaction, an intent (package effects:
//     a row in the effects table; the batch's relay job in River's) for
//     every event it applies. Nothing performs them; the ratio to the same
//     variant without effects is what recording costs (target: ≥0.75×).
//
// Every run uses a fresh schema and read model, starts after a CHECKPOINT,
// and fails unless the read model equals ledger.Fold of the events. Metrics: events/s (deliveries,
// duplicates included, per second), unique-events/s for the shuffled streams,
// and, in percent of one core over the timed run, client-cpu-% (this
// process), pg-cpu-% (its server backends, when the server is local) and
// other-cpu-% (the rest of the machine, Postgres' background writers
// included; approximate: /proc/stat and per-process accounting disagree by
// up to ~15 points on round-trip-heavy runs, so it can dip below 0): a run
// with a high other-cpu-% shared the machine and is noise. Run with -v to
// see the gate's counts per run and, at the end, the ratio table:
//
//	go test -run '^$' -bench BenchmarkLedger -benchtime=1x -count=3 -v ./projection/
//
// scripts/bench-ratios.sh runs rounds of every variant in separate processes
// (interleaved in time) and prints the same table over all rounds.
//
// Profiling: -ledger.pglog=/var/log/postgresql/postgresql-15-main.log logs
// the server time per statement type of each run, -ledger.explain=20ms has
// the server log the plans of slow statements, and -cpuprofile shows the
// client's CPU (timed runs carry the label ledger=<variant>/workers=<n>, for
// go tool pprof -tagfocus). These flags follow the package on the go test
// command line. docs/benchmarks.md has the figures and where the time goes.
func BenchmarkLedger(b *testing.B) {
	events := ledger.Generate(rand.New(rand.NewPCG(2024, 1)), benchPayments, benchVersions)
	shuffled := benchShuffle(rand.New(rand.NewPCG(2024, 2)), events, benchDuplicates)
	jittered := benchJitter(rand.New(rand.NewPCG(2024, 3)), events, 2*benchBatch, benchJitterDuplicates)
	subset := events[:benchNaiveSubset]
	all := newBenchExpectation(b, events)
	first := newBenchExpectation(b, subset)

	workloads := []*benchWorkload{
		{name: "naive", kind: benchKindNaive, workers: []int{1, 4}, partitioned: true, deliveries: subset, want: first},
		{name: "setbased", kind: benchKindSetBased, workers: []int{1, 4}, partitioned: true, deliveries: events, want: all},
		{name: "setbased+version-rows", kind: benchKindFloor, workers: []int{1, 4}, partitioned: true, deliveries: events, want: all},
		{name: "setbased+version-rows+log", kind: benchKindFloorLog, workers: []int{1}, deliveries: events, want: all},
		{name: "setbased+marks", kind: benchKindMarksFloor, workers: []int{1}, deliveries: events, want: all},
		{name: "setbased+marks-fold8", kind: benchKindMarksFloor, foldEvery: 8, workers: []int{1}, deliveries: events, want: all},
		{name: "copy-only", kind: benchKindCopy, workers: []int{1, 4}, partitioned: true, deliveries: events, want: all},
		{name: "setbased+inline", kind: benchKindInlineFloor, workers: []int{1, 4}, partitioned: true, deliveries: events, want: all},
		{name: "setbased+inline-unguarded", kind: benchKindInlineFloor, guard: guardNone, workers: []int{1}, deliveries: events, want: all},
		{name: "setbased+inline-advisory", kind: benchKindInlineFloor, guard: guardAdvisory, workers: []int{1, 4}, partitioned: true, deliveries: events, want: all},
		{name: "setbased+parking", kind: benchKindParkFloor, workers: []int{1}, deliveries: shuffled, want: all},
		{name: "setbased+parking+state", kind: benchKindParkStateFloor, workers: []int{1}, deliveries: shuffled, want: all},
		{name: "setbased+parking+marks", kind: benchKindParkFloor, marks: true, workers: []int{1}, deliveries: shuffled, want: all},
		{name: "setbased+parking+marks-jittered-partitioned", kind: benchKindParkFloor, marks: true, workers: []int{4}, partitioned: true, deliveries: jittered, want: all},
		{name: "setbased+parking-jittered-partitioned", kind: benchKindParkFloor, workers: []int{4}, partitioned: true, deliveries: jittered, want: all},
		{name: "setbased+parking+state-jittered-partitioned", kind: benchKindParkStateFloor, workers: []int{4}, partitioned: true, deliveries: jittered, want: all},
		{name: "inorder-inline-ordered", kind: benchKindInline, workers: []int{1}, deliveries: events, want: all},
		{name: "inorder-inline-ordered-partitioned", kind: benchKindInline, workers: []int{4}, partitioned: true, deliveries: events, want: all},
		{name: "inorder-inline-jittered-partitioned", kind: benchKindInline, workers: []int{4}, partitioned: true, deliveries: jittered, want: all},
		{name: "inorder-inline-jittered-partitioned-exclusive", kind: benchKindInline, workers: []int{4}, partitioned: true, exclusive: true, deliveries: jittered, want: all},
		{name: "inorder-inline-jittered-partitioned-exclusive-owner", kind: benchKindInline, workers: []int{4}, partitioned: true, exclusive: true, owner: true, deliveries: jittered, want: all},
		{name: "inorder-inline-ordered-owner", kind: benchKindInline, workers: []int{1}, owner: true, deliveries: events, want: all},
		{name: "inorder-inline-shuffled-owner", kind: benchKindInline, workers: []int{1}, owner: true, deliveries: shuffled, want: all},
		{name: "inorder-inline-shuffled", kind: benchKindInline, workers: []int{1}, deliveries: shuffled, want: all},
		{name: "inorder-ordered", kind: benchKindInorder, workers: []int{1, 4}, deliveries: events, want: all},
		{name: "inorder-ordered+effects", kind: benchKindInorderEffects, workers: []int{1, 4}, deliveries: events, want: all},
		{name: "inorder-ordered-partitioned", kind: benchKindInorder, workers: []int{4}, partitioned: true, deliveries: events, want: all},
		{name: "inorder-shuffled", kind: benchKindInorder, workers: []int{1, 4}, deliveries: shuffled, want: all},
		{name: "inorder-shuffled+effects", kind: benchKindInorderEffects, workers: []int{1, 4}, deliveries: shuffled, want: all},
		{name: "inorder-shuffled-partitioned", kind: benchKindInorder, workers: []int{4}, partitioned: true, deliveries: shuffled, want: all},
	}
	results := &benchResults{runs: map[string][]benchRun{}}
	for _, w := range workloads {
		b.Run(w.name, func(b *testing.B) {
			for _, n := range w.workers {
				b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
					w.bench(b, n, results)
				})
			}
		})
	}
	if table := results.table(workloads); table != "" {
		b.Log("\n" + table)
	}
}

type benchKind int

const (
	benchKindNaive benchKind = iota
	benchKindSetBased
	benchKindInorder
	// benchKindFloor is setbased plus the least any gate that keeps a
	// version row per aggregate must do: write each aggregate's row once per
	// transaction, in the handler's own pipeline (no read, no lock, no
	// check, no applied log; correct only for in-order, partitioned
	// delivery). Its ratio to setbased bounds what such a gate can reach.
	benchKindFloor
	// benchKindInorderEffects is benchKindInorder with one effect intent
	// recorded per applied event (benchEffectsLedger).
	benchKindInorderEffects
	// benchKindInline is the gate with the inline ledger (projection.Inline):
	// the payment row carries the version. benchKindInorder and
	// benchKindInorderEffects run the ledger with version rows.
	benchKindInline
	// benchKindCopy is the ceiling of any writer of the same rows: each
	// batch's payment states, legs and balance deltas, folded in memory,
	// written with COPY into tables of the same columns without keys or
	// indexes (no read, no upsert, no check).
	benchKindCopy
	// benchKindParkFloor bounds any gate that parks durably, on a stream
	// out of order: the set-based handler applies what continues each
	// aggregate, and in the same pipeline one statement parks the batch's
	// future versions (their payloads, in inorder's parked table) and one
	// deletes those it drains. Everything else is free: the applied
	// versions and the parked set live in this process's memory (no read,
	// no lock, no version row, no conflict check), drained payloads come
	// from memory instead of being read back, and it is correct only with
	// one writer per aggregate (workers partitioned). Its ratio to
	// setbased is the most a parking gate can reach on the same stream.
	benchKindParkFloor
	// benchKindParkStateFloor is benchKindParkFloor with the gate's state
	// kept where issue 13's design keeps it, in tables, and touched only for
	// the aggregates that leave the fast path (those with parked versions,
	// a version to park or a stale delivery): a first round trip reads
	// their state rows (without locks: the upsert that writes them back
	// would carry a compare-and-set) and the parked events of those that
	// drain, and the write pipeline also upserts their state rows.
	// Decisions still come from memory (what is read is not used), and
	// nothing is checked for conflicts: a bound on that design, not a gate.
	benchKindParkStateFloor
	// benchKindInlineFloor bounds the inline fast path, on a stream in
	// order: the inline ledger's set-based handler called directly, its
	// payments' upsert carrying InlineTable.Condition and SetLog with each
	// run's log entries (each event's payload hashed, as conflict detection
	// needs), and, in the same pipeline, one insert of the empty state rows
	// of the aggregates that start at version 1 (the fast path's guard of
	// new aggregates; benchWorkload.guard replaces it: none, a fenced
	// owner's bound, or advisory locks). No validation, no read, no plan,
	// no outcome: a bound on the gate, not a gate; correct only for
	// in-order, partitioned delivery.
	benchKindInlineFloor
	// benchKindFloorLog is benchKindFloor with each version row's applied
	// log, as the gate keeps it for conflict detection: a 16-byte hash of
	// each version appended (BenchmarkHotRows' setbased+version-rows has it
	// too).
	benchKindFloorLog
	// benchKindMarksFloor bounds a fenced owner that marks each batch as a
	// whole (bench_marks_test.go): setbased plus one mark row per batch, and
	// a fold of the marks into version rows every foldEvery batches, and
	// once at the end of the run.
	benchKindMarksFloor
)

// benchJitterDuplicates is the share of exact copies in the jittered stream.
const benchJitterDuplicates = 0.05

// benchJitter returns events with each delivery displaced by up to
// displacement positions later, plus share×len copies of random events,
// each near its original: what competing consumers of an ordered stream
// deliver.
func benchJitter(rng *rand.Rand, events []aggregate.Event, displacement int, share float64) []aggregate.Event {
	type keyed struct {
		key int
		e   aggregate.Event
	}
	out := make([]keyed, 0, len(events)+int(float64(len(events))*share))
	for i, e := range events {
		out = append(out, keyed{i + rng.IntN(displacement+1), e})
	}
	for range int(float64(len(events)) * share) {
		i := rng.IntN(len(events))
		out = append(out, keyed{i + rng.IntN(displacement+1), events[i]})
	}
	slices.SortStableFunc(out, func(a, b keyed) int { return cmp.Compare(a.key, b.key) })
	es := make([]aggregate.Event, len(out))
	for i, k := range out {
		es[i] = k.e
	}
	return es
}

// benchEffectKind is the effect kind of benchEffectsLedger's intents.
const benchEffectKind = "ledger.event.webhook"

// benchEffectsLedger is the ledger recording, in the handler's transaction,
// one effect intent per event it applies, as a projection that notifies a
// remote side of every change would.
type benchEffectsLedger struct {
	*ledger.Projection
	fx *effects.Client
}

func (l benchEffectsLedger) ApplyBatch(ctx context.Context, tx *projection.Tx, events []aggregate.Event) error {
	if err := l.Projection.ApplyBatch(ctx, tx, events); err != nil {
		return err
	}
	intents := make([]effects.Intent, len(events))
	for i, e := range events {
		intents[i] = effects.Intent{Kind: benchEffectKind, Event: e, Args: benchEffectArgs{Payment: e.Aggregate, Version: e.Version, Type: e.Type}}
	}
	_, err := l.fx.Record(ctx, tx, intents...)
	return err
}

type benchEffectArgs struct {
	Payment string `json:"payment"`
	Version int64  `json:"version"`
	Type    string `json:"type"`
}

// benchWorkload is one sub-benchmark family.
type benchWorkload struct {
	name        string
	kind        benchKind
	workers     []int
	partitioned bool              // each worker owns a hash partition of the aggregates
	exclusive   bool              // the batches say so (projection.Batch.Exclusive)
	owner       bool              // benchKindInline: projection.Config.Owner
	marks       bool              // benchKindParkFloor: with a fenced owner's marks (bench_marks_test.go)
	foldEvery   int64             // benchKindMarksFloor, marks: batches between folds (0: at the end only)
	guard       benchGuard        // benchKindInlineFloor: how new aggregates are guarded (bench_guard_test.go)
	deliveries  []aggregate.Event // in delivery order, duplicates included
	want        *benchExpectation
}

// benchExpectation is what a run must leave behind.
type benchExpectation struct {
	events   int // distinct events
	model    *ledger.Model
	versions map[string]int64
}

func newBenchExpectation(b *testing.B, events []aggregate.Event) *benchExpectation {
	b.Helper()
	m, err := ledger.Fold(events)
	require.NoError(b, err)
	versions := map[string]int64{}
	for _, e := range events {
		versions[e.Aggregate] = max(versions[e.Aggregate], e.Version)
	}
	return &benchExpectation{events: len(events), model: m, versions: versions}
}

// benchShuffle returns events in random order, plus share×len
// exact copies of random events at random positions.
func benchShuffle(rng *rand.Rand, events []aggregate.Event, share float64) []aggregate.Event {
	return streamtest.WithCopies(rng, events, int(float64(len(events))*share))
}

// bench runs the workload with n workers, b.N times, each time on a fresh
// schema, timing only the processing of the stream.
func (w *benchWorkload) bench(b *testing.B, workers int, results *benchResults) {
	b.StopTimer()
	b.ResetTimer()
	key := fmt.Sprintf("%s/workers=%d", w.name, workers)
	var elapsed, clientCPU, pgCPU, machineBusy time.Duration
	pgCPUKnown, machineCPUKnown := true, true
	for range b.N {
		env := newBenchEnv(b, w.kind, workers, w.owner)
		ctx := b.Context()
		var logFrom int64
		if *ledgerPGLog != "" {
			st, err := os.Stat(*ledgerPGLog)
			require.NoError(b, err)
			logFrom = st.Size()
		}
		// Every run starts from clean buffers: the runs before it (other
		// variants, heavier ones among them) leave dirty pages and WAL
		// whose checkpoint would otherwise land in whichever run comes
		// next, against the variants late in the list.
		if _, err := env.pool.Exec(ctx, `CHECKPOINT`); err != nil {
			b.Logf("no checkpoint before the run (needs a superuser or pg_checkpoint): %v", err)
		}
		before := benchSampleCPU(env.pids.list())

		b.StartTimer()
		began := time.Now()
		var err error
		pprof.Do(ctx, pprof.Labels("ledger", key), func(ctx context.Context) {
			err = w.run(ctx, env, workers)
		})
		took := time.Since(began)
		b.StopTimer()

		after := benchSampleCPU(env.pids.list())
		require.NoError(b, err, key)
		elapsed += took
		clientCPU += after.client - before.client
		if d, ok := after.pgSince(before); ok {
			pgCPU += d
		} else {
			pgCPUKnown = false
		}
		if after.machineOK && before.machineOK {
			machineBusy += after.machine - before.machine
		} else {
			machineCPUKnown = false
		}
		if *ledgerPGLog != "" {
			b.Log(benchStatementReport(b, *ledgerPGLog, logFrom, env.pids.set(), took, workers))
		}
		w.verify(b, env)
		results.add(key, benchRun{
			eps:       float64(len(w.deliveries)) / took.Seconds(),
			uniqueEPS: float64(w.want.events) / took.Seconds(),
		})
	}
	secs := elapsed.Seconds()
	b.ReportMetric(float64(b.N*len(w.deliveries))/secs, "events/s")
	if len(w.deliveries) != w.want.events {
		b.ReportMetric(float64(b.N*w.want.events)/secs, "unique-events/s")
	}
	b.ReportMetric(100*clientCPU.Seconds()/secs, "client-cpu-%")
	if pgCPUKnown {
		b.ReportMetric(100*pgCPU.Seconds()/secs, "pg-cpu-%")
		if machineCPUKnown {
			b.ReportMetric(100*(machineBusy-clientCPU-pgCPU).Seconds()/secs, "other-cpu-%")
		}
	}
}

// benchEnv is one run's fresh schema, pool and projection.
type benchEnv struct {
	db     *pgtest.DB
	pool   *pgxpool.Pool
	pids   *benchPIDs
	ledger *ledger.Projection
	proc   *projection.Processor
	warns  *benchWarnings
	copied *benchCopyState // benchKindCopy's payments
	parked *benchParkState // benchKindParkFloor's state
}

// benchParkState is benchKindParkFloor's state, in memory: each aggregate's
// applied version and parked events.
type benchParkState struct {
	mu      sync.Mutex // workers own disjoint aggregates (partitioned)
	applied map[string]int64
	parked  map[string]map[int64]aggregate.Event
}

// benchParkApply is benchKindParkFloor: one transaction, one round trip;
// with state, benchKindParkStateFloor; with marks, a fenced owner's mark of
// the events it applies (bench_marks_test.go; the caller folds).
func benchParkApply(ctx context.Context, pool *pgxpool.Pool, buf *buffer.Buffer, h projection.BatchHandler, st *benchParkState, chunk []aggregate.Event, state bool, marks *benchMarks) error {
	events := slices.Clone(chunk)
	slices.SortStableFunc(events, func(a, b aggregate.Event) int {
		return cmp.Or(strings.Compare(a.Aggregate, b.Aggregate), cmp.Compare(a.Version, b.Version))
	})
	var apply, park []aggregate.Event
	var parkHashes [][]byte // not computed: no conflict detection here
	var drainAggs []string
	var drainVers []int64
	// With state: the aggregates that leave the fast path, their state once
	// the batch is applied, and those whose parked events are read.
	var offAggs, loadAggs []string
	var offVers []int64
	var offParked []int32
	st.mu.Lock()
	for i, e := range events {
		cur, pk := st.applied[e.Aggregate], st.parked[e.Aggregate]
		if state && (i == 0 || events[i-1].Aggregate != e.Aggregate) {
			// Off the fast path: something parked, or deliveries that do
			// not continue the version in one run (copies allowed).
			off, advances, last := len(pk) > 0, false, cur
			for _, f := range events[i:] {
				if f.Aggregate != e.Aggregate {
					break
				}
				switch f.Version {
				case last:
					off = off || f.Version == cur // stale
				case last + 1:
					last = f.Version
				default:
					off = true
				}
				advances = advances || f.Version == cur+1
			}
			if off {
				offAggs = append(offAggs, e.Aggregate)
			}
			if len(pk) > 0 && advances {
				loadAggs = append(loadAggs, e.Aggregate)
			}
		}
		if _, dup := pk[e.Version]; dup || e.Version <= cur {
			continue
		}
		if e.Version > cur+1 {
			if pk == nil {
				pk = map[int64]aggregate.Event{}
				st.parked[e.Aggregate] = pk
			}
			pk[e.Version] = e
			park, parkHashes = append(park, e), append(parkHashes, []byte{})
			continue
		}
		apply = append(apply, e)
		for cur++; ; cur++ {
			next, ok := pk[cur+1]
			if !ok {
				break
			}
			delete(pk, cur+1)
			apply = append(apply, next)
			drainAggs, drainVers = append(drainAggs, next.Aggregate), append(drainVers, next.Version)
		}
		st.applied[e.Aggregate] = cur
	}
	for _, agg := range offAggs {
		offVers, offParked = append(offVers, st.applied[agg]), append(offParked, int32(len(st.parked[agg])))
	}
	st.mu.Unlock()
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if state && len(offAggs) > 0 {
			b := &pgx.Batch{}
			b.Queue(`SET LOCAL plan_cache_mode = force_custom_plan`)
			b.Queue(`SELECT k.aggregate, s.version, s.parked FROM unnest($2::text[]) AS k(aggregate)
CROSS JOIN LATERAL (SELECT version, parked FROM floor_state WHERE projection = $1 AND aggregate = k.aggregate OFFSET 0) s`,
				benchProjection, offAggs)
			if len(loadAggs) > 0 {
				buf.QueueLoad(b, benchProjection, loadAggs, func([]buffer.Parked) {})
			}
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
		}
		t := projection.NewTx(tx)
		// As the gate does: a generic plan cached while the tables were
		// small would scan them (the ledger's read of payments, 38 ms per
		// transaction instead of 1.3 without this).
		t.Queue(`SET LOCAL plan_cache_mode = force_custom_plan`)
		// inorder's own statements (package buffer), in the handler's
		// pipeline.
		if len(park) > 0 {
			buf.QueuePark(projection.TxBatch(t), benchProjection, park, parkHashes)
		}
		if len(drainAggs) > 0 {
			buf.QueueDelete(projection.TxBatch(t), benchProjection, drainAggs, drainVers)
		}
		if len(offAggs) > 0 {
			t.Queue(`INSERT INTO floor_state AS s (projection, aggregate, version, parked)
SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::int[])
ON CONFLICT (projection, aggregate) DO UPDATE SET version = EXCLUDED.version, parked = EXCLUDED.parked, rev = s.rev + 1`,
				benchProjection, offAggs, offVers, offParked)
		}
		if len(apply) > 0 {
			if err := h.ApplyBatch(ctx, t, apply); err != nil {
				return err
			}
		}
		projection.Finish(t) // the handler's Sums (TxSums)
		if marks != nil && len(apply) > 0 {
			marks.queue(t, apply)
		}
		return t.Flush(ctx)
	})
}

// benchFloorStateDDL is benchKindParkStateFloor's table: the gate's state
// as inorder's versions table keeps it.
const benchFloorStateDDL = `CREATE TABLE floor_state (projection text, aggregate text, version bigint NOT NULL DEFAULT 0,
  parked int NOT NULL DEFAULT 0, rev bigint NOT NULL DEFAULT 1, PRIMARY KEY (projection, aggregate))`

// benchCopyState is the payments' state that benchKindCopy folds in memory.
type benchCopyState struct {
	mu    sync.Mutex
	state map[string]*ledger.Payment
}

// benchCopyApply folds a batch in memory and writes its rows with COPY in
// one transaction (benchKindCopy).
func benchCopyApply(ctx context.Context, pool *pgxpool.Pool, cs *benchCopyState, chunk []aggregate.Event) error {
	events := slices.Clone(chunk)
	slices.SortStableFunc(events, func(a, b aggregate.Event) int {
		return cmp.Or(strings.Compare(a.Aggregate, b.Aggregate), cmp.Compare(a.Version, b.Version))
	})
	var payments, legs [][]any
	deltas := map[string]int64{}
	cs.mu.Lock()
	for i, e := range events {
		next, ls, err := ledger.Step(cs.state[e.Aggregate], e)
		if err != nil {
			cs.mu.Unlock()
			return err
		}
		cs.state[e.Aggregate] = next
		if i == len(events)-1 || events[i+1].Aggregate != e.Aggregate {
			payments = append(payments, []any{next.ID, next.Payer, next.Payee, next.Status, next.Authorized, next.Captured, next.Refunded, next.Version})
		}
		for _, l := range ls {
			legs = append(legs, []any{l.Payment, l.Version, l.Leg, l.Account, l.Amount})
			deltas[l.Account] += l.Amount
		}
	}
	cs.mu.Unlock()
	balances := make([][]any, 0, len(deltas))
	for _, a := range slices.Sorted(maps.Keys(deltas)) {
		balances = append(balances, []any{a, deltas[a]})
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, c := range []struct {
			table string
			cols  []string
			rows  [][]any
		}{
			{"copy_payments", []string{"payment_id", "payer", "payee", "status", "authorized", "captured", "refunded", "version"}, payments},
			{"copy_legs", []string{"payment_id", "version", "leg", "account", "amount"}, legs},
			{"copy_balances", []string{"account", "delta"}, balances},
		} {
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{c.table}, c.cols, pgx.CopyFromRows(c.rows)); err != nil {
				return fmt.Errorf("copy %s: %w", c.table, err)
			}
		}
		return nil
	})
}

func newBenchEnv(b *testing.B, kind benchKind, workers int, owner bool) *benchEnv {
	b.Helper()
	ctx := b.Context()
	db := pgtest.NewMigrated(b)
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(b, err)
	cfg.MaxConns = int32(workers + 1)
	// The inline ledger for the inline gate; the others keep version rows
	// (the set-based baselines write the payments the same way either way).
	opts := &ledger.Options{VersionRows: kind != benchKindInline && kind != benchKindInlineFloor}
	env := &benchEnv{db: db, pids: &benchPIDs{}, ledger: ledger.New(opts), warns: &benchWarnings{}, copied: &benchCopyState{state: map[string]*ledger.Payment{}},
		parked: &benchParkState{applied: map[string]int64{}, parked: map[string]map[int64]aggregate.Event{}}}
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		env.pids.add(c.PgConn().PID())
		return nil
	}
	if *ledgerPGLog != "" {
		// Session settings of these connections only (superuser); the
		// server's configuration is left alone.
		cfg.ConnConfig.RuntimeParams["log_min_duration_statement"] = "0"
		cfg.ConnConfig.RuntimeParams["log_parameter_max_length"] = "0"
	}
	if *ledgerExplain > 0 {
		cfg.ConnConfig.RuntimeParams["session_preload_libraries"] = "auto_explain"
		cfg.ConnConfig.RuntimeParams["auto_explain.log_min_duration"] = strconv.FormatInt(ledgerExplain.Milliseconds(), 10)
	}
	env.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(b, err)
	b.Cleanup(env.pool.Close) // before pgtest drops the schema

	switch kind {
	case benchKindInorder, benchKindInorderEffects, benchKindInline:
		var p projection.Projection = env.ledger
		if kind == benchKindInorderEffects {
			_, err := effects.MigrateRiver(ctx, env.pool, &effects.RiverMigrateOptions{Schema: db.Schema})
			require.NoError(b, err)
			fx, err := effects.New(env.pool, &effects.Config{Schema: db.Schema},
				effects.HandlerFunc(benchEffectKind, func(context.Context, *effects.Effect) error { return nil }))
			require.NoError(b, err)
			p = benchEffectsLedger{Projection: env.ledger, fx: fx}
		}
		env.proc, err = projection.New(env.pool, &projection.Config{Schema: db.Schema, Logger: slog.New(env.warns), Owner: owner}, p)
		require.NoError(b, err)
		b.Cleanup(func() { require.NoError(b, env.proc.Close(context.Background())) })
		require.NoError(b, env.proc.Setup(ctx))
	default:
		require.NoError(b, pgx.BeginFunc(ctx, env.pool, func(tx pgx.Tx) error { return env.ledger.Setup(ctx, tx) }))
		switch kind {
		case benchKindNaive:
			_, err := env.pool.Exec(ctx, `CREATE TABLE naive_versions (aggregate text PRIMARY KEY, version bigint NOT NULL DEFAULT 0)`)
			require.NoError(b, err)
		case benchKindCopy:
			_, err := env.pool.Exec(ctx, `CREATE TABLE copy_payments (payment_id text, payer text, payee text, status text,
  authorized bigint, captured bigint, refunded bigint, version bigint);
CREATE TABLE copy_legs (payment_id text, version bigint, leg smallint, account text, amount bigint);
CREATE TABLE copy_balances (account text, delta bigint)`)
			require.NoError(b, err)
		case benchKindParkStateFloor:
			_, err := env.pool.Exec(ctx, benchFloorStateDDL)
			require.NoError(b, err)
		case benchKindMarksFloor, benchKindParkFloor:
			_, err := env.pool.Exec(ctx, benchMarksDDL)
			require.NoError(b, err)
		case benchKindFloor, benchKindFloorLog:
			// The shape of inorder's versions table, key included.
			_, err := env.pool.Exec(ctx, `CREATE TABLE floor_versions (projection text, aggregate text, version bigint NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now(), log bytea NOT NULL DEFAULT '', PRIMARY KEY (projection, aggregate))`)
			require.NoError(b, err)
		}
	}
	// Open every connection the run uses now, so connecting is not timed.
	conns := make([]*pgxpool.Conn, 0, workers)
	for range workers {
		c, err := env.pool.Acquire(ctx)
		require.NoError(b, err)
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	return env
}

// run processes the whole stream once.
func (w *benchWorkload) run(ctx context.Context, env *benchEnv, workers int) error {
	switch w.kind {
	case benchKindNaive:
		return benchFanOut(ctx, w.deliveries, 1, workers, w.partitioned, func(ctx context.Context, es []aggregate.Event) error {
			return benchNaiveApply(ctx, env.pool, es[0])
		})
	case benchKindSetBased:
		return benchFanOut(ctx, w.deliveries, benchBatch, workers, w.partitioned, func(ctx context.Context, es []aggregate.Event) error {
			return benchSetBasedApply(ctx, env.pool, env.ledger, es, false, false)
		})
	case benchKindFloor:
		return benchFanOut(ctx, w.deliveries, benchBatch, workers, w.partitioned, func(ctx context.Context, es []aggregate.Event) error {
			return benchSetBasedApply(ctx, env.pool, env.ledger, es, true, false)
		})
	case benchKindFloorLog:
		return benchFanOut(ctx, w.deliveries, benchBatch, workers, w.partitioned, func(ctx context.Context, es []aggregate.Event) error {
			return benchSetBasedApply(ctx, env.pool, env.ledger, es, true, true)
		})
	case benchKindInlineFloor:
		return benchFanOut(ctx, w.deliveries, benchBatch, workers, w.partitioned, func(ctx context.Context, es []aggregate.Event) error {
			return benchInlineApply(ctx, env.pool, env.ledger, es, w.guard)
		})
	case benchKindMarksFloor:
		marks := &benchMarks{projection: benchProjection, foldEvery: w.foldEvery}
		err := benchFanOut(ctx, w.deliveries, benchBatch, workers, w.partitioned, func(ctx context.Context, es []aggregate.Event) error {
			events, _ := benchInOrder(es)
			if err := pgx.BeginFunc(ctx, env.pool, func(tx pgx.Tx) error {
				t := projection.NewTx(tx)
				if err := env.ledger.ApplyBatch(ctx, t, events); err != nil {
					return err
				}
				projection.Finish(t) // the ledger's balances (TxSums)
				marks.queue(t, events)
				return t.Flush(ctx)
			}); err != nil {
				return err
			}
			return marks.committed(ctx, env.pool)
		})
		if err != nil {
			return err
		}
		return marks.fold(ctx, env.pool) // what is left, as an owner handing over
	case benchKindCopy:
		return benchFanOut(ctx, w.deliveries, benchBatch, workers, w.partitioned, func(ctx context.Context, es []aggregate.Event) error {
			return benchCopyApply(ctx, env.pool, env.copied, es)
		})
	case benchKindParkFloor, benchKindParkStateFloor:
		if workers != 1 && !w.partitioned {
			return errors.New("setbased+parking: one writer per aggregate only")
		}
		if !w.marks {
			return benchFanOut(ctx, w.deliveries, benchBatch, workers, w.partitioned, func(ctx context.Context, es []aggregate.Event) error {
				return benchParkApply(ctx, env.pool, buffer.New(env.db.Schema), env.ledger, env.parked, es, w.kind == benchKindParkStateFloor, nil)
			})
		}
		marks := &benchMarks{projection: benchProjection, foldEvery: w.foldEvery}
		err := benchFanOut(ctx, w.deliveries, benchBatch, workers, w.partitioned, func(ctx context.Context, es []aggregate.Event) error {
			if err := benchParkApply(ctx, env.pool, buffer.New(env.db.Schema), env.ledger, env.parked, es, false, marks); err != nil {
				return err
			}
			return marks.committed(ctx, env.pool)
		})
		if err != nil {
			return err
		}
		return marks.fold(ctx, env.pool) // what is left, as an owner handing over
	default:
		return benchFanOut(ctx, w.deliveries, benchBatch, workers, w.partitioned, func(ctx context.Context, es []aggregate.Event) error {
			_, err := env.proc.Process(ctx, projection.Batch{Events: es, Source: "bench", Exclusive: w.exclusive})
			return err
		})
	}
}

// benchFanOut calls fn on consecutive chunks of events from workers goroutines.
// Partitioned, worker i handles, in order, the chunks of the events whose
// aggregate hashes to i; otherwise the workers take the chunks of the whole
// stream from one queue, in order, as they become free.
func benchFanOut(ctx context.Context, events []aggregate.Event, size, workers int, partitioned bool, fn func(context.Context, []aggregate.Event) error) error {
	g, ctx := errgroup.WithContext(ctx)
	if partitioned {
		for _, part := range benchPartition(events, workers) {
			g.Go(func() error {
				for chunk := range slices.Chunk(part, size) {
					if err := fn(ctx, chunk); err != nil {
						return err
					}
				}
				return nil
			})
		}
		return g.Wait()
	}
	queue := make(chan []aggregate.Event)
	g.Go(func() error {
		defer close(queue)
		for chunk := range slices.Chunk(events, size) {
			select {
			case queue <- chunk:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	for range workers {
		g.Go(func() error {
			for chunk := range queue {
				if err := fn(ctx, chunk); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

func benchPartition(events []aggregate.Event, n int) [][]aggregate.Event {
	parts := make([][]aggregate.Event, n)
	for _, e := range events {
		h := fnv.New32a()
		h.Write([]byte(e.Aggregate))
		i := int(h.Sum32() % uint32(n))
		parts[i] = append(parts[i], e)
	}
	return parts
}

// benchSetBasedApply is the hand-written baseline: the ledger's set-based handler
// in a plain transaction, no gate. The handler wants each aggregate's events
// together, in version order. With versionRows (benchKindFloor), the same
// pipeline also upserts each aggregate's last version into floor_versions;
// with log (benchKindFloorLog), and appends its versions' 16-byte hashes.
func benchSetBasedApply(ctx context.Context, pool *pgxpool.Pool, l *ledger.Projection, chunk []aggregate.Event, versionRows, log bool) error {
	events := slices.Clone(chunk)
	slices.SortStableFunc(events, func(a, b aggregate.Event) int {
		return cmp.Or(strings.Compare(a.Aggregate, b.Aggregate), cmp.Compare(a.Version, b.Version))
	})
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		t := projection.NewTx(tx)
		if err := l.ApplyBatch(ctx, t, events); err != nil {
			return err
		}
		projection.Finish(t) // the ledger's balances (TxSums)
		switch {
		case versionRows && log:
			aggs, vers, logs := benchLogEntries(events)
			t.Queue(`INSERT INTO floor_versions AS v (projection, aggregate, version, log)
SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bytea[])
ON CONFLICT (projection, aggregate) DO UPDATE SET version = EXCLUDED.version, log = v.log || EXCLUDED.log, updated_at = now()`, benchProjection, aggs, vers, logs)
		case versionRows:
			var aggs []string
			var vers []int64
			for i, e := range events {
				if i+1 == len(events) || events[i+1].Aggregate != e.Aggregate {
					aggs, vers = append(aggs, e.Aggregate), append(vers, e.Version)
				}
			}
			t.Queue(`INSERT INTO floor_versions AS v (projection, aggregate, version)
SELECT $1, * FROM unnest($2::text[], $3::bigint[])
ON CONFLICT (projection, aggregate) DO UPDATE SET version = EXCLUDED.version, updated_at = now()`, benchProjection, aggs, vers)
		}
		return t.Flush(ctx)
	})
}

// benchInlineApply is benchKindInlineFloor: the inline ledger's handler with
// the runs' log entries, and the new aggregates' guard (empty state rows,
// unless the workload's guard says otherwise), in one pipeline.
func benchInlineApply(ctx context.Context, pool *pgxpool.Pool, l *ledger.Projection, chunk []aggregate.Event, guard benchGuard) error {
	events, fresh := benchInOrder(chunk)
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		t := projection.NewTx(tx)
		queueInlineGuard(t, benchProjection, fresh, guard)
		projection.SetInlineRuns(t, events)
		if err := l.ApplyBatch(ctx, t, events); err != nil {
			return err
		}
		projection.Finish(t) // the ledger's balances (TxSums)
		return t.Flush(ctx)
	})
}

// benchInOrder returns chunk sorted by aggregate and version, and the
// aggregates whose first version in it is 1: those a consumer without a
// gate inserts version rows for.
func benchInOrder(chunk []aggregate.Event) ([]aggregate.Event, []string) {
	events := slices.Clone(chunk)
	slices.SortStableFunc(events, func(a, b aggregate.Event) int {
		return cmp.Or(strings.Compare(a.Aggregate, b.Aggregate), cmp.Compare(a.Version, b.Version))
	})
	var fresh []string
	for i, e := range events {
		if e.Version == 1 && (i == 0 || events[i-1].Aggregate != e.Aggregate) {
			fresh = append(fresh, e.Aggregate)
		}
	}
	return events, fresh
}

// benchNaiveApply is the naive consumer: one transaction per event, one
// statement per round trip.
func benchNaiveApply(ctx context.Context, pool *pgxpool.Pool, e aggregate.Event) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO naive_versions (aggregate) VALUES ($1) ON CONFLICT DO NOTHING`, e.Aggregate); err != nil {
			return fmt.Errorf("naive: insert version: %w", err)
		}
		var version int64
		if err := tx.QueryRow(ctx, `SELECT version FROM naive_versions WHERE aggregate = $1 FOR UPDATE`, e.Aggregate).Scan(&version); err != nil {
			return fmt.Errorf("naive: lock version: %w", err)
		}
		switch {
		case e.Version <= version:
			return nil // a duplicate
		case e.Version > version+1:
			return fmt.Errorf("naive: %s v%d arrived at version %d: the naive consumer needs in-order delivery", e.Aggregate, e.Version, version)
		}
		var pm ledger.Payment
		var p *ledger.Payment
		err := tx.QueryRow(ctx, `SELECT payer, payee, status, authorized, captured, refunded, version FROM ledger_payments WHERE payment_id = $1`, e.Aggregate).
			Scan(&pm.Payer, &pm.Payee, &pm.Status, &pm.Authorized, &pm.Captured, &pm.Refunded, &pm.Version)
		switch {
		case err == nil:
			pm.ID = e.Aggregate
			p = &pm
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("naive: read payment: %w", err)
		}
		next, legs, err := ledger.Step(p, e)
		if err != nil {
			return err
		}
		deltas := map[string]int64{}
		for _, l := range legs {
			if _, err := tx.Exec(ctx, `INSERT INTO ledger_legs (payment_id, version, leg, account, amount) VALUES ($1, $2, $3, $4, $5)`,
				l.Payment, l.Version, l.Leg, l.Account, l.Amount); err != nil {
				return fmt.Errorf("naive: insert leg: %w", err)
			}
			deltas[l.Account] += l.Amount
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ledger_payments (payment_id, payer, payee, status, authorized, captured, refunded, version) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (payment_id) DO UPDATE SET status = EXCLUDED.status, authorized = EXCLUDED.authorized, captured = EXCLUDED.captured, refunded = EXCLUDED.refunded, version = EXCLUDED.version, updated_at = now()`,
			next.ID, next.Payer, next.Payee, next.Status, next.Authorized, next.Captured, next.Refunded, next.Version); err != nil {
			return fmt.Errorf("naive: upsert payment: %w", err)
		}
		for _, acct := range slices.Sorted(maps.Keys(deltas)) { // one lock order for every worker
			if _, err := tx.Exec(ctx, `INSERT INTO ledger_balances AS b (account, balance) VALUES ($1, $2) ON CONFLICT (account) DO UPDATE SET balance = b.balance + EXCLUDED.balance`,
				acct, deltas[acct]); err != nil {
				return fmt.Errorf("naive: upsert balance: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE naive_versions SET version = $2 WHERE aggregate = $1`, e.Aggregate, e.Version); err != nil {
			return fmt.Errorf("naive: bump version: %w", err)
		}
		return nil
	})
}

// verify fails the benchmark unless the run left the expected read model
// and version state (and, for inorder, the expected outcome counts).
func (w *benchWorkload) verify(b *testing.B, env *benchEnv) {
	b.Helper()
	ctx := b.Context()
	if w.kind == benchKindCopy {
		// The ceiling writes the rows, not the read model: all of them.
		var legs int
		require.NoError(b, env.pool.QueryRow(ctx, `SELECT count(*) FROM copy_legs`).Scan(&legs))
		require.Equal(b, len(w.want.model.Legs), legs, "legs copied")
		return
	}
	got, err := env.ledger.Load(ctx, env.pool)
	require.NoError(b, err)
	benchRequireModel(b, w.want.model, got)

	versionsSQL := `SELECT aggregate, version FROM naive_versions`
	switch w.kind {
	case benchKindInorder, benchKindInorderEffects:
		versionsSQL = `SELECT aggregate, version FROM versions WHERE projection = '` + benchProjection + `'`
	case benchKindInline, benchKindInlineFloor:
		// The payment rows carry the versions.
		versionsSQL = `SELECT payment_id, version FROM ledger_payments`
	case benchKindFloor, benchKindFloorLog:
		versionsSQL = `SELECT aggregate, version FROM floor_versions`
	case benchKindMarksFloor:
		versionsSQL = `SELECT aggregate, version FROM floor_mark_versions`
	}
	if w.kind == benchKindParkFloor || w.kind == benchKindParkStateFloor {
		var parked int
		require.NoError(b, env.pool.QueryRow(ctx, `SELECT count(*) FROM parked`).Scan(&parked))
		require.Zero(b, parked, "events left parked")
		if !w.marks {
			return
		}
		versionsSQL = `SELECT aggregate, version FROM floor_mark_versions`
	}
	if w.kind != benchKindSetBased {
		rows, err := env.pool.Query(ctx, versionsSQL)
		require.NoError(b, err)
		versions := map[string]int64{}
		var agg string
		var v int64
		_, err = pgx.ForEachRow(rows, []any{&agg, &v}, func() error {
			versions[agg] = v
			return nil
		})
		require.NoError(b, err)
		require.True(b, reflect.DeepEqual(w.want.versions, versions), "versions differ from the stream's last versions")
	}
	if w.kind == benchKindInorderEffects {
		// One intent per event; its job comes from its batch's relay job
		// (nothing works them here).
		var intents, relays, unrelayed int
		require.NoError(b, env.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM effects WHERE state = 'pending'),
  (SELECT count(*) FROM river_job WHERE kind = $1), (SELECT count(*) FROM effects WHERE batch IS NULL)`, effects.RelayJobKind).Scan(&intents, &relays, &unrelayed))
		require.Equal(b, w.want.events, intents, "one intent per event")
		require.Positive(b, relays, "relay jobs")
		b.Logf("%d intents, %d relay jobs, %d intents with a job of their own", intents, relays, unrelayed)
	}
	if w.kind != benchKindInorder && w.kind != benchKindInorderEffects && w.kind != benchKindInline {
		return
	}
	var parked, blocked int
	require.NoError(b, env.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM parked), (SELECT count(*) FROM versions WHERE blocked OR parked <> 0)`).Scan(&parked, &blocked))
	require.Zero(b, parked, "events left parked")
	require.Zero(b, blocked, "version rows left blocked or with parked events")
	c := env.proc.Counts()[benchProjection]
	d := c.Deliveries
	require.EqualValues(b, w.want.events, c.Applied(), "events applied")
	require.EqualValues(b, len(w.deliveries)-w.want.events, d[projection.Duplicate], "duplicates")
	require.EqualValues(b, d[projection.Parked], c.Drained, "parked events drained")
	require.Zero(b, d[projection.Conflict]+d[projection.Quarantined]+d[projection.Rejected], "conflicts, quarantines, rejections")
	spec, miss := projection.Speculation(env.proc)
	b.Logf("%d batches (fast path %d, left it %d): applied on arrival %d, parked %d (all drained), duplicates %d; warnings: %s",
		c.Batches, spec, miss, d[projection.Applied], d[projection.Parked], d[projection.Duplicate], env.warns)
}

// benchRequireModel compares read models and, when they differ, reports a short
// summary instead of a diff of 100k rows.
func benchRequireModel(b *testing.B, want, got *ledger.Model) {
	b.Helper()
	if reflect.DeepEqual(want, got) {
		return
	}
	var diffs []string
	payments := 0
	for id, p := range want.Payments {
		if g, ok := got.Payments[id]; !ok || g != p {
			if payments == 0 {
				diffs = append(diffs, fmt.Sprintf("payment %s: want %+v, got %+v", id, p, g))
			}
			payments++
		}
	}
	diffs = append(diffs,
		fmt.Sprintf("%d/%d payments differ (%d read)", payments, len(want.Payments), len(got.Payments)),
		fmt.Sprintf("legs: want %d, got %d", len(want.Legs), len(got.Legs)),
		fmt.Sprintf("balances: want %d non-zero, got %d", len(want.Balances), len(got.Balances)))
	require.Fail(b, "read model differs from ledger.Fold", strings.Join(diffs, "\n"))
}

// benchPIDs holds the server process ids of a pool's connections.
type benchPIDs struct {
	mu   sync.Mutex
	pids map[uint32]bool
}

func (s *benchPIDs) add(pid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pids == nil {
		s.pids = map[uint32]bool{}
	}
	s.pids[pid] = true
}

func (s *benchPIDs) set() map[uint32]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.pids)
}

func (s *benchPIDs) list() []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]uint32, 0, len(s.pids))
	for p := range s.pids {
		out = append(out, p)
	}
	return out
}

// benchCPU is the CPU time used so far by this process, by the server
// backends of a pool (when they are local processes) and by the whole
// machine.
type benchCPU struct {
	client    time.Duration
	pg        map[uint32]time.Duration
	pgOK      bool
	machine   time.Duration
	machineOK bool
}

func benchSampleCPU(pids []uint32) benchCPU {
	var s benchCPU
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		s.client = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	s.pg = map[uint32]time.Duration{}
	s.pgOK = true
	for _, pid := range pids {
		d, ok := benchBackendCPU(pid)
		if !ok {
			s.pgOK = false
			break
		}
		s.pg[pid] = d
	}
	s.machine, s.machineOK = benchMachineCPU()
	return s
}

// benchMachineCPU reads the CPU time every core spent busy (neither idle nor
// waiting for I/O) from /proc/stat.
func benchMachineCPU() (time.Duration, bool) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, false
	}
	var busy int64
	for i, v := range f[1:8] { // user nice system idle iowait irq softirq
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, false
		}
		if i != 3 && i != 4 {
			busy += n
		}
	}
	return time.Duration(busy) * 10 * time.Millisecond, true
}

// pgSince returns the backends' CPU time between before and s.
func (s benchCPU) pgSince(before benchCPU) (time.Duration, bool) {
	if !s.pgOK || !before.pgOK {
		return 0, false
	}
	var d time.Duration
	for pid, t := range s.pg {
		d += t - before.pg[pid]
	}
	return d, true
}

// benchBackendCPU reads a local postgres process's user+system CPU time from
// /proc (in clock ticks of 10 ms).
func benchBackendCPU(pid uint32) (time.Duration, bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(raw)
	end := strings.LastIndexByte(s, ')')
	if !strings.Contains(s[:max(end, 0)], "(postgres") {
		return 0, false // not a local server process
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, true
}

// benchWarnings is a slog handler that counts the processor's warnings
// (retried batches) by message.
type benchWarnings struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *benchWarnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *benchWarnings) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[r.Message]++
	return nil
}

func (h *benchWarnings) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *benchWarnings) WithGroup(string) slog.Handler      { return h }

func (h *benchWarnings) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.n) == 0 {
		return "none"
	}
	var parts []string
	for m, n := range h.n {
		parts = append(parts, fmt.Sprintf("%d× %q", n, m))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// benchRun is one timed pass over a stream.
type benchRun struct{ eps, uniqueEPS float64 }

// benchResults collects every run of every sub-benchmark, for the ratio
// table.
type benchResults struct {
	mu   sync.Mutex
	runs map[string][]benchRun
}

func (r *benchResults) add(key string, run benchRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runs[key] = append(r.runs[key], run)
}

// median returns the median events/s (uniqueEPS if unique) of the runs
// of key, false for none; r.mu is held.
func (r *benchResults) median(key string, unique bool) (float64, bool) {
	runs := r.runs[key]
	if len(runs) == 0 {
		return 0, false
	}
	xs := make([]float64, len(runs))
	for i, run := range runs {
		xs[i] = run.eps
		if unique {
			xs[i] = run.uniqueEPS
		}
	}
	return benchMedian(xs), true
}

// ratio formats x against the median events/s of base ("-" without runs);
// r.mu is held.
func (r *benchResults) ratio(x float64, base string) string {
	y, ok := r.median(base, false)
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2f×", x/y)
}

func benchMedian(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// table returns the medians and the ratios of every variant to the setbased
// and naive runs with the same number of workers, against the targets.
func (r *benchResults) table(ws []*benchWorkload) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.runs) == 0 {
		return ""
	}
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\truns\tevents/s\tunique-events/s\tvs setbased\tvs setbased (unique)\tvs naive\tvs without effects\tvs copy-only\tvs setbased+version-rows\tvs setbased+parking\ttarget\t")
	for _, w := range ws {
		for _, n := range w.workers {
			key := fmt.Sprintf("%s/workers=%d", w.name, n)
			eps, ok := r.median(key, false)
			if !ok {
				continue
			}
			ueps, _ := r.median(key, true)
			setbased, naive := fmt.Sprintf("setbased/workers=%d", n), fmt.Sprintf("naive/workers=%d", n)
			target, vsPlain := "-", "-"
			switch {
			case strings.HasSuffix(w.name, "+effects"):
				// The same variant without effects, same workers.
				vsPlain = r.ratio(eps, fmt.Sprintf("%s/workers=%d", strings.TrimSuffix(w.name, "+effects"), n))
				target = "≥0.75× without effects"
			case strings.HasPrefix(w.name, "inorder-inline-ordered"):
				target = "≥0.95× setbased"
			case strings.HasPrefix(w.name, "inorder-inline-jittered"):
				target = "≥0.9× setbased"
			case strings.HasPrefix(w.name, "inorder-inline-shuffled"):
				target = "≥0.7× setbased"
			case strings.HasPrefix(w.name, "inorder-"):
				target = "≥0.85× setbased+version-rows"
			}
			vsParking := "-"
			if strings.Contains(w.name, "shuffled") && w.kind != benchKindParkFloor && w.kind != benchKindParkStateFloor {
				// Both count deliveries; the ratio of unique events.
				if y, ok := r.median(fmt.Sprintf("setbased+parking/workers=%d", n), true); ok {
					vsParking = fmt.Sprintf("%.2f×", ueps/y)
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", key, len(r.runs[key]), eps, ueps,
				r.ratio(eps, setbased), r.ratio(ueps, setbased), r.ratio(eps, naive), vsPlain,
				r.ratio(ueps, fmt.Sprintf("copy-only/workers=%d", n)), r.ratio(ueps, fmt.Sprintf("setbased+version-rows/workers=%d", n)), vsParking, target)
		}
	}
	tw.Flush()
	return "medians over runs; ratios against the baseline with the same number of workers\n" + sb.String()
}

// benchStmtStat is the server time of one statement type.
type benchStmtStat struct {
	calls int
	total time.Duration
}

var benchDurationLine = regexp.MustCompile(`\[(\d+)\] .*?LOG:  duration: ([0-9.]+) ms  (parse|bind|execute|statement)[^:]*: (.*)$`)

// benchStatementReport reads the server log written since offset from and sums,
// per statement type, the parse+bind+execute durations the sessions pids
// logged.
func benchStatementReport(b *testing.B, path string, from int64, pids map[uint32]bool, wall time.Duration, conns int) string {
	b.Helper()
	f, err := os.Open(path)
	require.NoError(b, err)
	defer f.Close()
	_, err = f.Seek(from, 0)
	require.NoError(b, err)
	stats := map[string]*benchStmtStat{}
	type entry struct {
		ms    float64
		phase string
		sql   string
	}
	var cur *entry
	done := func() {
		if cur == nil {
			return
		}
		class := benchClassify(cur.sql)
		st := stats[class]
		if st == nil {
			st = &benchStmtStat{}
			stats[class] = st
		}
		st.total += time.Duration(cur.ms * float64(time.Millisecond))
		if cur.phase == "execute" || cur.phase == "statement" {
			st.calls++
		}
		cur = nil
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "\t") { // a continuation of the statement's text
			if cur != nil {
				cur.sql += "\n" + line[1:]
			}
			continue
		}
		done()
		m := benchDurationLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		pid, _ := strconv.ParseUint(m[1], 10, 32)
		if !pids[uint32(pid)] {
			continue
		}
		ms, _ := strconv.ParseFloat(m[2], 64)
		cur = &entry{ms: ms, phase: m[3], sql: m[4]}
	}
	done()
	require.NoError(b, sc.Err())
	classes := make([]string, 0, len(stats))
	var server time.Duration
	for c, st := range stats {
		classes = append(classes, c)
		server += st.total
	}
	slices.SortFunc(classes, func(x, y string) int { return cmp.Compare(stats[y].total, stats[x].total) })
	txns := max(stats["commit"].callsOrZero(), 1)
	connTime := wall * time.Duration(conns)
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nserver time per statement type: %v wall × %d connection(s) = %v connection time, %d transactions\n",
		wall.Round(time.Millisecond), conns, connTime.Round(time.Millisecond), txns)
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "statement\tcalls\ttotal ms\tms/call\tms/txn\t% conn time\t")
	row := func(name string, calls int, total time.Duration) {
		ms := total.Seconds() * 1000
		perCall := "-"
		if calls > 0 {
			perCall = fmt.Sprintf("%.3f", ms/float64(calls))
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%.3f\t%.1f\t\n", name, calls, ms, perCall, ms/float64(txns), 100*total.Seconds()/connTime.Seconds())
	}
	for _, c := range classes {
		row(c, stats[c].calls, stats[c].total)
	}
	row("= all statements (server)", 0, server)
	row("= outside the server (client, network)", 0, connTime-server)
	tw.Flush()
	return sb.String()
}

func (s *benchStmtStat) callsOrZero() int {
	if s == nil {
		return 0
	}
	return s.calls
}

// benchClassify names the statement sql (its whole text, as logged).
func benchClassify(sql string) string {
	first, _, _ := strings.Cut(sql, "\n")
	verb, _, _ := strings.Cut(strings.TrimSpace(first), " ")
	verb = strings.ToUpper(verb)
	has := func(s string) bool { return strings.Contains(sql, s) }
	switch {
	case verb == "BEGIN", verb == "COMMIT":
		return strings.ToLower(verb)
	case has("pg_advisory_xact_lock_shared"):
		return "gate: rebuild lock (advisory, shared)"
	case has(`"versions"`):
		switch {
		case verb == "SELECT" && has("UNION ALL"):
			return "gate: load applied log (stale versions)"
		case verb == "INSERT" && has("generate_series"):
			return "gate: move version-row logs to applied"
		case verb == "SELECT" && has("FOR UPDATE"):
			return "gate: lock version rows"
		case verb == "SELECT":
			return "gate: read version rows"
		case verb == "INSERT" && has("DO NOTHING"):
			return "gate: insert missing version rows"
		case (verb == "INSERT" || verb == "WITH") && has("-k.expected"):
			return "gate: write version rows (speculative)"
		case verb == "INSERT" && has("rev - 1"):
			return "gate: write version rows (compare-and-set)"
		case verb == "INSERT", verb == "UPDATE":
			return "gate: write version rows"
		}
	case has(`"parked"`):
		switch {
		case verb == "SELECT" && has("p.data"):
			return "gate: load parked (whole events)"
		case verb == "SELECT":
			return "gate: probe parked keys"
		case verb == "INSERT":
			return "gate: park"
		case verb == "DELETE":
			return "gate: delete drained"
		}
	case verb == "SET" && has("plan_cache_mode"):
		return "gate: set plan_cache_mode"
	case has(`"applied"`):
		switch verb {
		case "SELECT":
			return "gate: load applied log (stale versions)"
		case "INSERT":
			return "gate: insert applied log"
		}
	case has(`"quarantine"`), has(`"conflicts"`), has(`"rejected"`):
		return "gate: quarantine, conflicts, rejected"
	case has(`"effects"`):
		return "effects: record intents"
	case has("river_job"):
		return "effects: River jobs (COPY)"
	case has("pg_notify"):
		return "effects: River's insert notification"
	case has("floor_versions"):
		return "floor: upsert version rows"
	case has("naive_versions"):
		switch verb {
		case "INSERT":
			return "naive: insert missing version row"
		case "SELECT":
			return "naive: lock version row"
		default:
			return "naive: bump version"
		}
	case has("ledger_payments") && verb == "SELECT":
		return "ledger: read payments"
	case has("ledger_payments"):
		return "ledger: upsert payments"
	case has("ledger_legs"):
		return "ledger: insert legs"
	case has("ledger_balances"):
		return "ledger: upsert balances"
	}
	if len(first) > 40 {
		first = first[:40] + "…"
	}
	return "other: " + first
}
