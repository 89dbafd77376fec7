package pgtable_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/inorder/inorder/internal/benchtest"
	"github.com/inorder/inorder/internal/ledgertest"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/pgtable"
)

var benchPayments = flag.Int("pgtable.payments", 5000, "BenchmarkPostgresSource: payments (events = payments × 6)")

// BenchmarkPostgresSource measures what the events-table source costs on
// top of the processor: the ledger projection fed by the source (16
// partitions, 4 workers, batches of 500) beside the processor alone fed the
// same events in the same order, partitioned by aggregate over 4
// goroutines, in batches of 500. Two workload shapes, each in its own
// events table, loaded once with COPY:
//
//   - ordered: each payment's events in version order (Append's order);
//   - shuffled: the whole stream shuffled — the table holds versions out of
//     order (a writer bypassing Append, an outbox filled by several
//     services): the gate parks the futures and drains them.
//
// Each round runs, per shape, on a fresh processor schema each:
//
//   - processor: Processor.Process alone, 4 goroutines;
//   - pgtable-1: one Source, 4 workers;
//   - pgtable-3: three Sources of one Name sharing the partitions (as three
//     processes would: each its own processor and connections), 2 workers
//     each; its time includes the leases' first balancing.
//
// It reports each variant's events/s (median over the rounds) and the
// median of the per-round ratios to the processor alone (target ≥ 0.8×),
// and checks the read model against the in-order fold after every source
// run.
//
//	go test -run '^$' -bench BenchmarkPostgresSource -benchtime 3x -v ./source/pgtable/
func BenchmarkPostgresSource(b *testing.B) {
	const batchSize = 500
	events := ledger.Generate(rand.New(rand.NewPCG(42, 42)), *benchPayments, 6)
	shuffled := slices.Clone(events)
	rand.New(rand.NewPCG(7, 7)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	shapes := []struct {
		name   string
		stream []aggregate.Event
		table  *pgtest.DB // holds the stream
	}{
		{name: "ordered", stream: events},
		{name: "shuffled", stream: shuffled},
	}
	for i := range shapes {
		shapes[i].table = pgtest.NewMigrated(b)
		loadEvents(b, shapes[i].table, shapes[i].stream)
	}
	n := len(events)
	newProc := func(b *testing.B, db *pgtest.DB) (*projection.Processor, *ledger.Projection) {
		l := ledger.New(nil)
		p, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema}, l)
		require.NoError(b, err)
		require.NoError(b, p.Setup(b.Context()))
		return p, l
	}
	requireFold := func(b *testing.B, db *pgtest.DB, l *ledger.Projection) {
		b.StopTimer()
		defer b.StartTimer()
		ledgertest.RequireFoldOn(b, db, l, events)
	}
	processorRun := func(stream []aggregate.Event) time.Duration {
		db := pgtest.NewMigrated(b)
		proc, l := newProc(b, db)
		took := benchtest.Baseline(b, proc, stream, batchSize, n)
		requireFold(b, db, l)
		return took
	}
	sourceRun := func(table *pgtest.DB, sources, workers int) time.Duration {
		db := pgtest.NewMigrated(b)
		var procs []*projection.Processor
		var l *ledger.Projection
		for range sources {
			p, pl := newProc(b, db)
			procs = append(procs, p)
			l = pl
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		began := time.Now()
		var runs []chan error
		for _, p := range procs {
			src, err := pgtable.New(&pgtable.Config{
				URL: table.URL, Processor: p, Schema: table.Schema, Name: "bench",
				Workers: workers, BatchSize: batchSize, MaxWait: 20 * time.Millisecond, LagEvery: -1,
				LeaseEvery: 100 * time.Millisecond,
			})
			require.NoError(b, err)
			done := make(chan error, 1)
			go func() { done <- src.Run(ctx) }()
			runs = append(runs, done)
		}
		applied := func() int64 {
			var a int64
			for _, p := range procs {
				a += p.Counts()["ledger"].Applied()
			}
			return a
		}
		deadline := time.Now().Add(5 * time.Minute)
		for applied() < int64(n) {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d events applied after 5 minutes", applied(), n)
			}
			time.Sleep(2 * time.Millisecond)
		}
		took := time.Since(began)
		cancel()
		for _, done := range runs {
			require.NoError(b, <-done)
		}
		requireFold(b, db, l)
		return took
	}
	variants := []string{"processor", "pgtable-1", "pgtable-3"}
	names := []string{shapes[0].name, shapes[1].name}
	rates := benchtest.Rounds(b, n, names,
		benchtest.Variant{Name: variants[0], Run: func(sh, _ int) time.Duration { return processorRun(shapes[sh].stream) }},
		benchtest.Variant{Name: variants[1], Run: func(sh, _ int) time.Duration { return sourceRun(shapes[sh].table, 1, 4) }},
		benchtest.Variant{Name: variants[2], Run: func(sh, _ int) time.Duration { return sourceRun(shapes[sh].table, 3, 2) }},
	)
	rates.Report(b, names, variants, [2]string{variants[1], "processor"}, [2]string{variants[2], "processor"})
	for _, sh := range names {
		for _, v := range variants[1:] {
			r, _ := rates.Ratio(sh+"/"+v, sh+"/processor")
			b.Logf("%-9s %s / processor: %.2f× (median of %d per-round ratios)", sh, v, r, len(rates[sh+"/"+v]))
		}
	}
}

// loadEvents writes stream to db's events table in its order, with COPY,
// 5000 rows per transaction.
func loadEvents(b *testing.B, db *pgtest.DB, stream []aggregate.Event) {
	b.Helper()
	for chunk := range slices.Chunk(stream, 5000) {
		rows := make([][]any, len(chunk))
		for i, e := range chunk {
			rows[i] = []any{e.Aggregate, e.Version, e.StableID(), e.Type, string(e.Data)}
		}
		_, err := db.Pool.CopyFrom(b.Context(), pgx.Identifier{db.Schema, "events"}, []string{"aggregate", "version", "id", "type", "data"}, pgx.CopyFromRows(rows))
		require.NoError(b, err, fmt.Sprintf("loading %d events", len(stream)))
	}
}
