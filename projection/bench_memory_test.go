package projection_test

import (
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

var memAggregates = flag.Int("memory.aggregates", 100_000,
	"BenchmarkGateMemory: aggregates to feed (1000000 for issue 28's figure)")

var memRowCache = flag.Int("memory.rowcache", 0, "BenchmarkGateMemory: Config.RowCache (0 the default, negative: no memory)")

// BenchmarkGateMemory measures what the gate's memory of its state costs the
// process (issue 28: ≤ 150 MB at 1M aggregates, bounded by a configurable
// cache). A processor whose projection keeps version rows (the journal) is
// fed -memory.aggregates aggregates out of order, batches of 1000: each
// window's version 2 first (parked), then the window before's version 1
// (applied, the parked version 2 drained from the memory). Batches are made
// as they are sent, so the process holds little beside the processor. It
// reports the peak RSS over the feed (VmHWM, reset before it), the Go heap in
// use after it, the aggregates the memory holds at the end and the version
// rows taken from it (-memory.rowcache=-1: the same without the memory); and fails unless every aggregate ends at versions 1
// and 2, in order, with nothing parked.
//
//	go test -run '^$' -bench BenchmarkGateMemory -benchtime=1x -v ./projection/ -memory.aggregates=1000000
func BenchmarkGateMemory(b *testing.B) {
	ctx := b.Context()
	db := pgtest.NewMigrated(b)
	proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema, RowCache: *memRowCache}, opJournal{"journal"})
	require.NoError(b, err)
	require.NoError(b, proc.Setup(ctx))
	const window = 1000
	n := *memAggregates / window * window
	batch := func(w int, v int64) []aggregate.Event {
		evs := make([]aggregate.Event, window)
		for i := range evs {
			evs[i] = aggregate.Event{Aggregate: fmt.Sprintf("agg-%08d", w*window+i), Version: v, Type: "note", Data: []byte(`{"n":1}`)}
		}
		return evs
	}
	for b.Loop() {
		runtime.GC()
		rbResetPeakRSS(b)
		start := time.Now()
		for w := 0; w <= n/window; w++ {
			if w < n/window {
				_, err := proc.Process(ctx, projection.Batch{Events: batch(w, 2)})
				require.NoError(b, err)
			}
			if w > 0 {
				_, err := proc.Process(ctx, projection.Batch{Events: batch(w-1, 1)})
				require.NoError(b, err)
			}
		}
		elapsed := time.Since(start)
		peak := rbPeakRSS(b)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		hits, misses, remembered := projection.Memory(proc)
		b.ReportMetric(float64(peak)/(1<<20), "peak-rss-MiB")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-inuse-MiB")
		b.ReportMetric(float64(remembered), "remembered")
		b.ReportMetric(float64(hits), "memory-hits")
		b.ReportMetric(float64(2*n)/elapsed.Seconds(), "events/s")
		b.Logf("%d aggregates, %d deliveries in %v: peak RSS %d MiB, heap in use %d MiB, %d aggregates remembered, %d version rows from memory, %d misses",
			n, 2*n, elapsed.Round(time.Millisecond), peak>>20, ms.HeapInuse>>20, remembered, hits, misses)
		require.Zero(b, misses)
		require.Equal(b, int64(2*n), opCount(b, db, `SELECT count(*) FROM op_journal`), "every version applied once")
		require.Zero(b, opCount(b, db, `SELECT count(*) FROM (SELECT array_agg(version ORDER BY seq) AS vs FROM op_journal GROUP BY aggregate) j
WHERE vs <> '{1,2}'`), "every aggregate at versions 1 and 2, in order")
		require.Zero(b, opCount(b, db, `SELECT count(*) FROM `+db.Schema+`.parked`), "nothing left parked")
	}
}
