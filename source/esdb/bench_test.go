package esdb_test

import (
	"context"
	"hash/fnv"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
)

// BenchmarkESDB measures the source end to end — in-process EventStoreDB,
// real client, catch-up subscription, four partitioned workers, the ledger
// projection — beside the processor alone fed the same events, partitioned
// the same way, in batches of the same size. It reports both rates and their
// ratio; the source should keep at least 70% of the processor's throughput.
//
//	go test -run '^$' -bench BenchmarkESDB -benchtime 1x ./source/esdb/
func BenchmarkESDB(b *testing.B) {
	const (
		payments  = 5000
		versions  = 10
		workers   = 4
		batchSize = 500
	)
	e := newEnv(b)
	events := generate(42, payments, versions)
	e.appendEvents(b, events)
	n := len(events)

	var procTime, srcTime time.Duration
	for b.Loop() {
		// The processor alone: each worker takes its aggregates' events,
		// in stream order, in batches.
		bp := setup(b)
		parts := make([][]aggregate.Event, workers)
		for _, ev := range events {
			h := fnv.New64a()
			h.Write([]byte(ev.Aggregate))
			w := h.Sum64() % workers
			parts[w] = append(parts[w], ev)
		}
		began := time.Now()
		var wg sync.WaitGroup
		for _, part := range parts {
			wg.Go(func() {
				for chunk := range slices.Chunk(part, batchSize) {
					_, err := bp.proc.Process(context.Background(), projection.Batch{Events: chunk})
					require.NoError(b, err)
				}
			})
		}
		wg.Wait()
		procTime += time.Since(began)
		require.EqualValues(b, n, bp.proc.Counts()["ledger"].Applied())

		// The source.
		bs := setup(b)
		began = time.Now()
		r := start(b, esdb.Config{
			URL: e.url, Processor: bs.proc, Name: "bench", Workers: workers, BatchSize: batchSize,
			RepairAfter: -1, Mapping: esdb.Mapping{StreamPrefix: e.prefix},
		})
		waitFor(b, r.commits, applied(n, bs.proc), "every event applied")
		srcTime += time.Since(began)
		require.NoError(b, r.stop())
	}
	procRate := float64(n*b.N) / procTime.Seconds()
	srcRate := float64(n*b.N) / srcTime.Seconds()
	b.ReportMetric(srcRate, "events/s")
	b.ReportMetric(procRate, "proc-events/s")
	b.ReportMetric(srcRate/procRate, "source/proc")
	b.ReportMetric(0, "ns/op")
}
