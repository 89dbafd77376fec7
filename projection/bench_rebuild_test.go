package projection_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

var rebuildMillion = flag.Bool("rebuild.million", false,
	"BenchmarkRebuild: also rebuild a stream of 1M events (100k payments), generated block by block, and report the process's peak RSS")

// BenchmarkRebuild measures a side-by-side rebuild (Processor.Build) of the
// ledger on BenchmarkLedger's workload — 100k events over 10k payments, in
// stream order — beside, in the same run:
//
//   - setbased/batch=N: the hand-written baseline of BenchmarkLedger (the
//     ledger's set-based handler, N events per transaction, no gate), one
//     worker;
//   - inorder-ordered/batch=N: the live gate (Processor.Process) on
//     batches of N consecutive events, one worker;
//   - rebuild/batch=N: Processor.Build into a new generation (code version
//     2, so no content comparison with the empty live generation) with
//     replay transactions of N events: the whole build — replay, finalize
//     (version rows, and for a projection that is not inline the applied
//     log), catch-up, the ledger's Verify and the switch — is timed;
//   - rebuild-unlogged/batch=N: the same with the tables unlogged during
//     the replay and made logged at finalize (BuildOptions.Unlogged);
//     before 1 Dec 2026 02:45 UTC that was the default, and "rebuild" and
//     "rebuild-logged" named the two;
//   - copy-only: the final read model (ledger.Fold) written with COPY into
//     empty tables, one transaction: the least any rebuild must write, the
//     ceiling.
//
// N is 1000 (BenchmarkLedger's batch) and 5000 (the rebuild's default).
// Every run uses a fresh schema and must leave the read model equal to
// ledger.Fold. It logs the ratio table (with -v); the rebuild's phases are
// reported as replay-s, finalize-s, catchup-s and verify-switch-s.
//
//	go test -run '^$' -bench BenchmarkRebuild -benchtime=1x -count=3 -v ./projection/
//
// With -rebuild.million, a last variant rebuilds 1M events (100k payments,
// generated and streamed block by block, so the workload is not held in
// memory) and reports peak-rss-MB: the process's peak resident memory
// during the build (VmHWM, reset before it), and start-rss-MB: what the
// process held when the build started (the other variants' 100k-event
// workload among it). Alone:
//
//	go test -run '^$' -bench 'BenchmarkRebuild/rebuild-1M' -benchtime=1x -v ./projection/ -rebuild.million
func BenchmarkRebuild(b *testing.B) {
	events := ledger.Generate(rand.New(rand.NewPCG(2024, 1)), benchPayments, benchVersions)
	want := newBenchExpectation(b, events)
	results := &benchResults{runs: map[string][]benchRun{}}
	type variant struct {
		name string
		run  func(b *testing.B, env *rbBenchEnv, batch int) (time.Duration, map[string]float64)
	}
	variants := []variant{
		{"setbased", func(b *testing.B, env *rbBenchEnv, batch int) (time.Duration, map[string]float64) {
			return env.timed(b, func(ctx context.Context) error {
				for chunk := range slices.Chunk(events, batch) {
					if err := benchSetBasedApply(ctx, env.pool, env.ledger, chunk, false, false); err != nil {
						return err
					}
				}
				return nil
			}), nil
		}},
		{"inorder-ordered", func(b *testing.B, env *rbBenchEnv, batch int) (time.Duration, map[string]float64) {
			return env.timed(b, func(ctx context.Context) error {
				for chunk := range slices.Chunk(events, batch) {
					if _, err := env.proc.Process(ctx, projection.Batch{Events: chunk, Source: "bench"}); err != nil {
						return err
					}
				}
				return nil
			}), nil
		}},
		{"rebuild", func(b *testing.B, env *rbBenchEnv, batch int) (time.Duration, map[string]float64) {
			return env.build(b, newGenStream(events, min(batch, 4096)), batch, false)
		}},
		{"rebuild-unlogged", func(b *testing.B, env *rbBenchEnv, batch int) (time.Duration, map[string]float64) {
			return env.build(b, newGenStream(events, min(batch, 4096)), batch, true)
		}},
		{"copy-only", func(b *testing.B, env *rbBenchEnv, batch int) (time.Duration, map[string]float64) {
			return env.timed(b, func(ctx context.Context) error { return rbCopyModel(ctx, env.pool, want.model) }), nil
		}},
	}
	for _, v := range variants {
		batches := []int{1000, 5000}
		if v.name == "copy-only" {
			batches = []int{0}
		}
		for _, batch := range batches {
			name := v.name
			if batch > 0 {
				name = fmt.Sprintf("%s/batch=%d", v.name, batch)
			}
			b.Run(name, func(b *testing.B) {
				var total time.Duration
				extra := map[string]float64{}
				for range b.N {
					env := newRBBenchEnv(b)
					took, ex := v.run(b, env, batch)
					total += took
					for k, x := range ex {
						extra[k] += x
					}
					env.verify(b, want.model, v.name)
					results.add(name, benchRun{eps: float64(len(events)) / took.Seconds()})
				}
				b.ReportMetric(float64(b.N*len(events))/total.Seconds(), "events/s")
				for k, x := range extra {
					b.ReportMetric(x/float64(b.N), k)
				}
			})
		}
	}
	if *rebuildMillion {
		b.Run("rebuild-1M/batch=5000", func(b *testing.B) {
			for range b.N {
				env := newRBBenchEnv(b)
				stream := newRBBlockStream(10, 10_000, benchVersions)
				runtime.GC()
				rbResetPeakRSS(b)
				base := rbRSS(b)
				took, ex := env.build(b, stream, 5000, false)
				peak := rbPeakRSS(b)
				env.verifySummary(b, stream.summary)
				b.ReportMetric(float64(stream.events)/took.Seconds(), "events/s")
				b.ReportMetric(float64(peak)/(1<<20), "peak-rss-MB")
				// What the process held before the build (the 100k-event
				// workload of the other variants among it).
				b.ReportMetric(float64(base)/(1<<20), "start-rss-MB")
				for k, x := range ex {
					b.ReportMetric(x, k)
				}
			}
		})
	}
	b.Log("\n" + rbTable(results))
}

// rbTable returns the medians and ratios of BenchmarkRebuild's variants.
func rbTable(r *benchResults) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sb strings.Builder
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\truns\tevents/s\tvs setbased\tvs inorder-ordered\tvs copy-only\ttarget\t")
	keys := make([]string, 0, len(r.runs))
	for k := range r.runs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		eps, _ := r.median(k, false)
		batch := "batch=1000"
		if strings.HasSuffix(k, "batch=5000") {
			batch = "batch=5000"
		}
		target := "-"
		if strings.HasPrefix(k, "rebuild/") {
			target = "≥1.0× setbased"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t\n", k, len(r.runs[k]), eps,
			r.ratio(eps, "setbased/"+batch), r.ratio(eps, "inorder-ordered/"+batch), r.ratio(eps, "copy-only"), target)
	}
	tw.Flush()
	return "medians over runs; ratios against the variant with the same batch size\n" + sb.String()
}

// rbBenchEnv is one BenchmarkRebuild run's fresh schema.
type rbBenchEnv struct {
	db     *pgtest.DB
	pool   *pgxpool.Pool
	ledger *ledger.Projection
	proc   *projection.Processor
	schema string // the read model's schema after the run ("" : the pool's)
}

func newRBBenchEnv(b *testing.B) *rbBenchEnv {
	b.Helper()
	ctx := b.Context()
	db := pgtest.NewMigrated(b)
	genCleanup(b, db)
	env := &rbBenchEnv{db: db, pool: db.Pool, ledger: ledger.New(nil)}
	var err error
	env.proc, err = projection.New(db.Pool, &projection.Config{Schema: db.Schema, Logger: slog.New(slog.DiscardHandler)}, env.ledger)
	require.NoError(b, err)
	require.NoError(b, env.proc.Setup(ctx))
	// Record generation 1 at code version 1 now, as the live workers of a
	// deployment would have: otherwise the first processor to load the
	// generations — the rebuild's, at code version 2 — records it at its
	// own version, and the build becomes a repair rebuild compared with an
	// empty live generation that never gets in step.
	gens, err := env.proc.Generations(ctx, "ledger")
	require.NoError(b, err)
	require.Len(b, gens, 1)
	require.Equal(b, 1, gens[0].CodeVersion)
	// Open the connections now, so connecting is not timed.
	var conns []*pgxpool.Conn
	for range 4 {
		c, err := db.Pool.Acquire(ctx)
		require.NoError(b, err)
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	return env
}

// timed runs fn with the benchmark timer on.
func (env *rbBenchEnv) timed(b *testing.B, fn func(ctx context.Context) error) time.Duration {
	b.Helper()
	b.StartTimer()
	start := time.Now()
	err := fn(b.Context())
	took := time.Since(start)
	b.StopTimer()
	require.NoError(b, err)
	return took
}

// build rebuilds the ledger at code version 2 from stream, timed, and
// returns the phases' durations.
func (env *rbBenchEnv) build(b *testing.B, stream projection.Stream, batch int, unlogged bool) (time.Duration, map[string]float64) {
	b.Helper()
	v2, err := projection.New(env.pool, &projection.Config{Schema: env.db.Schema, Logger: slog.New(slog.DiscardHandler)}, ledgertest.V2{Projection: env.ledger})
	require.NoError(b, err)
	phases := map[string]time.Time{}
	var res projection.BuildResult
	took := env.timed(b, func(ctx context.Context) error {
		res, err = v2.Build(ctx, "ledger", &projection.BuildOptions{Stream: stream, BatchSize: batch, Unlogged: unlogged,
			Progress: func(pr projection.BuildProgress) {
				if _, ok := phases[pr.Phase]; !ok {
					phases[pr.Phase] = time.Now()
				}
			}})
		return err
	})
	phases["end"] = phases[projection.PhaseReplay].Add(took)
	require.Equal(b, 2, res.Generation)
	gens, err := v2.Generations(b.Context(), "ledger")
	require.NoError(b, err)
	env.schema = gens[1].Schema
	span := func(from, to string) float64 { return phases[to].Sub(phases[from]).Seconds() }
	return took, map[string]float64{
		"replay-s":        span(projection.PhaseReplay, projection.PhaseFinalize),
		"finalize-s":      span(projection.PhaseFinalize, projection.PhaseCatchUp),
		"catchup-s":       span(projection.PhaseCatchUp, projection.PhaseVerify),
		"verify-switch-s": time.Since(phases[projection.PhaseVerify]).Seconds(),
	}
}

// verify fails the benchmark unless the read model equals want (and, for
// the rebuilds, the new generation's gate state is complete).
func (env *rbBenchEnv) verify(b *testing.B, want *ledger.Model, variant string) {
	b.Helper()
	ctx := b.Context()
	var got *ledger.Model
	require.NoError(b, pgx.BeginFunc(ctx, env.pool, func(tx pgx.Tx) error {
		if env.schema != "" {
			if _, err := tx.Exec(ctx, `SET LOCAL search_path = `+pgx.Identifier{env.schema}.Sanitize()); err != nil {
				return err
			}
		}
		var err error
		got, err = env.ledger.Load(ctx, tx)
		return err
	}))
	benchRequireModel(b, want, got)
	if strings.HasPrefix(variant, "rebuild") {
		var n, versions int64
		require.NoError(b, env.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(version), 0)::bigint FROM versions WHERE projection = 'ledger@2'`).
			Scan(&n, &versions))
		require.EqualValues(b, len(want.Payments), n, "version rows")
		require.EqualValues(b, benchPayments*benchVersions, versions, "versions")
	}
}

// rbCopyModel writes a read model with COPY into the empty ledger tables,
// in one transaction.
func rbCopyModel(ctx context.Context, pool *pgxpool.Pool, m *ledger.Model) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		now := time.Now()
		var rows [][]any
		for _, p := range m.Payments {
			rows = append(rows, []any{p.ID, p.Payer, p.Payee, p.Status, p.Authorized, p.Captured, p.Refunded, p.Version, now})
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"ledger_payments"},
			[]string{"payment_id", "payer", "payee", "status", "authorized", "captured", "refunded", "version", "updated_at"},
			pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		rows = rows[:0]
		for _, l := range m.Legs {
			rows = append(rows, []any{l.Payment, l.Version, l.Leg, l.Account, l.Amount})
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"ledger_legs"}, []string{"payment_id", "version", "leg", "account", "amount"},
			pgx.CopyFromRows(rows)); err != nil {
			return err
		}
		rows = rows[:0]
		for a, bal := range m.Balances {
			rows = append(rows, []any{a, bal})
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"ledger_balances"}, []string{"account", "balance"}, pgx.CopyFromRows(rows))
		return err
	})
}

// rbSummary sums up a ledger read model without holding it.
type rbSummary struct {
	payments, legs         int64
	authorized, legAmounts int64
	balances               map[string]int64
}

// rbBlockStream streams blocks of payments, each block generated when it is
// read: the workload is never held whole.
type rbBlockStream struct {
	blocks, payments, versions int
	events                     int
	summary                    rbSummary
}

func newRBBlockStream(blocks, payments, versions int) *rbBlockStream {
	return &rbBlockStream{blocks: blocks, payments: payments, versions: versions, events: blocks * payments * versions,
		summary: rbSummary{balances: map[string]int64{}}}
}

// Read implements projection.Stream; positions are "block/offset".
func (s *rbBlockStream) Read(ctx context.Context, from projection.Position, fn func(context.Context, projection.StreamBatch) error) error {
	startBlock, startAt := 0, 0
	if from != nil {
		blk, at, _ := strings.Cut(string(from), "/")
		startBlock, _ = strconv.Atoi(blk)
		startAt, _ = strconv.Atoi(at)
	}
	for blk := startBlock; blk < s.blocks; blk++ {
		events := ledger.Generate(rand.New(rand.NewPCG(7, uint64(blk))), s.payments, s.versions)
		for i := range events {
			n, _ := strconv.Atoi(strings.TrimPrefix(events[i].Aggregate, "pay-"))
			events[i].Aggregate = fmt.Sprintf("pay-%07d", blk*s.payments+n)
		}
		if from == nil || blk > startBlock || startAt == 0 {
			s.add(events)
		}
		at := 0
		if blk == startBlock {
			at = startAt
		}
		for at < len(events) {
			hi := min(at+4096, len(events))
			if err := fn(ctx, projection.StreamBatch{Events: events[at:hi], Read: int64(hi - at),
				Position: projection.Position(fmt.Sprintf("%d/%d", blk, hi))}); err != nil {
				return err
			}
			at = hi
		}
	}
	return ctx.Err()
}

// add folds a block into the summary.
func (s *rbBlockStream) add(events []aggregate.Event) {
	m, err := ledger.Fold(events)
	if err != nil {
		panic(err)
	}
	for _, p := range m.Payments {
		s.summary.payments++
		s.summary.authorized += p.Authorized
	}
	for _, l := range m.Legs {
		s.summary.legs++
		s.summary.legAmounts += max(l.Amount, 0)
	}
	for a, bal := range m.Balances {
		s.summary.balances[a] += bal
	}
}

// verifySummary compares the new generation's read model with a summary.
func (env *rbBenchEnv) verifySummary(b *testing.B, want rbSummary) {
	b.Helper()
	ctx := b.Context()
	var got rbSummary
	q := func(t string) string { return pgx.Identifier{env.schema, t}.Sanitize() }
	require.NoError(b, env.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+q("ledger_payments")+`),
  (SELECT coalesce(sum(authorized), 0)::bigint FROM `+q("ledger_payments")+`),
  (SELECT count(*) FROM `+q("ledger_legs")+`), (SELECT coalesce(sum(greatest(amount, 0)), 0)::bigint FROM `+q("ledger_legs")+`)`).
		Scan(&got.payments, &got.authorized, &got.legs, &got.legAmounts))
	rows, err := env.pool.Query(ctx, `SELECT account, balance FROM `+q("ledger_balances")+` WHERE balance <> 0`)
	require.NoError(b, err)
	got.balances = map[string]int64{}
	var a string
	var bal int64
	_, err = pgx.ForEachRow(rows, []any{&a, &bal}, func() error { got.balances[a] = bal; return nil })
	require.NoError(b, err)
	for k, v := range want.balances {
		if v == 0 {
			delete(want.balances, k)
		}
	}
	require.Equal(b, want, got)
}

// rbResetPeakRSS resets the process's peak resident set size (Linux).
func rbResetPeakRSS(b *testing.B) {
	b.Helper()
	require.NoError(b, os.WriteFile("/proc/self/clear_refs", []byte("5"), 0))
}

// rbPeakRSS returns the process's peak resident set size since the last
// reset, in bytes.
func rbPeakRSS(b *testing.B) int64 { return rbStatus(b, "VmHWM:") }

// rbRSS returns the process's resident set size now, in bytes.
func rbRSS(b *testing.B) int64 { return rbStatus(b, "VmRSS:") }

// rbStatus returns a size in kB of /proc/self/status, in bytes.
func rbStatus(b *testing.B, field string) int64 {
	b.Helper()
	raw, err := os.ReadFile("/proc/self/status")
	require.NoError(b, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(b, err)
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/self/status", field)
	return 0
}
