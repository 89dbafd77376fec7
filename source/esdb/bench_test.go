package esdb_test

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/inorder/inorder/internal/benchtest"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
	"github.com/inorder/inorder/source/esdb/esdbtest"
)

var (
	benchPayments = flag.Int("esdb.payments", 5000, "BenchmarkESDB: payments (events = payments × esdb.versions)")
	benchVersions = flag.Int("esdb.versions", 10, "BenchmarkESDB: versions per payment")
	benchOnly     = flag.String("esdb.variants", "", "BenchmarkESDB: comma-separated variants to run (default all)")
)

// benchVariant is one way of processing the benchmark's events; run returns
// the time it took and the source's figures (nil for the processor alone).
type benchVariant struct {
	name string
	run  func(b *testing.B, round int) (time.Duration, *benchFigures)
}

// benchFigures are what the sources of a run report.
type benchFigures struct {
	batches, deliveries int64
	idle                time.Duration // workers waiting for input (idle or filling), summed
	parked, duplicates  int64
}

// BenchmarkESDB measures the source end to end — in-process EventStoreDB,
// real client, the ledger projection, four workers in all — beside the
// processor alone fed the same events, partitioned the same way, in batches
// of the same size, in stream order. Each round runs every variant once, one
// after the other, on a fresh schema each:
//
//   - processor: Processor.Process alone, four goroutines, each with the
//     aggregates of one hash partition, batches of 500 in stream order.
//   - catch-up: one Source, catch-up subscription to $all, 4 workers.
//   - persistent-1: one Source consuming a persistent subscription group
//     (created by the source, so with its defaults), 4 workers.
//   - persistent-2: two Sources (as two processes would be: each its own
//     processor and connection) on one group created with the source's
//     defaults, 2 workers each. The in-process server reports version
//     26.0.3 (the release docker-compose.yml pins), so the group gets the
//     Pinned strategy: each stream's events go to one consumer.
//   - persistent-2-roundrobin: the same on a group created with the
//     RoundRobin strategy (what the source chooses on servers without the
//     fix of KurrentDB#5497): it deals one aggregate's events to both
//     consumers, so many arrive before their predecessors and park.
//
// It reports each variant's events/s (median over the rounds) and the
// median over the rounds of each variant's ratio to the processor alone in
// the same round, and of persistent-2 to catch-up. Targets: every source
// variant ≥ 0.70× the processor alone; persistent-2 ≥ 0.9× catch-up.
//
//	go test -run '^$' -bench BenchmarkESDB -benchtime 3x -v ./source/esdb/
func BenchmarkESDB(b *testing.B) {
	const (
		workers   = 4
		batchSize = 500
	)
	var e *env
	if os.Getenv("ESDB_URL") != "" {
		e = newEnv(b)
	} else {
		srv, err := esdbtest.Start(&esdbtest.Options{Version: "26.0.3"})
		require.NoError(b, err)
		b.Cleanup(srv.Close)
		e = newEnvAt(b, srv)
	}
	events := generate(42, *benchPayments, *benchVersions)
	e.appendEvents(b, events)
	n := len(events)

	sourceRun := func(b *testing.B, consumers int, persistent *esdb.Persistent) (time.Duration, *benchFigures) {
		anyCommit := newSignal()
		wait := func(cond func() bool) { waitFor(b, anyCommit, cond, "every event applied") }
		var rs []*running
		var procs []*projection.Processor
		took := benchtest.SourceRun(b, setup(b).Bundle, consumers, events, wait, func(i int, p *projection.Processor) func() error {
			cfg := esdb.Config{
				URL: e.url, Processor: p, Name: fmt.Sprintf("bench-%d", i), Workers: workers / consumers, BatchSize: batchSize,
				RepairAfter: -1, Mapping: esdb.Mapping{StreamPrefix: e.prefix},
			}
			if persistent != nil {
				ps := *persistent
				cfg.Persistent = &ps
			}
			r := start(b, cfg, anyCommit)
			rs, procs = append(rs, r), append(procs, p)
			return r.stop
		})
		f := &benchFigures{}
		for _, r := range rs {
			st := r.src.Stats()
			f.batches += st.Batches
			f.deliveries += st.Acked - st.Skipped
			f.idle += st.Dispatch.Idle + st.Dispatch.Filling
		}
		for _, p := range procs {
			c := p.Counts()["ledger"]
			f.parked += c.Deliveries[projection.Parked]
			f.duplicates += c.Deliveries[projection.Duplicate]
		}
		return took, f
	}
	variants := []benchVariant{
		{"processor", func(b *testing.B, _ int) (time.Duration, *benchFigures) {
			return benchtest.Baseline(b, setup(b).Proc, events, batchSize, n), nil
		}},
		{"catch-up", func(b *testing.B, _ int) (time.Duration, *benchFigures) { return sourceRun(b, 1, nil) }},
		{"persistent-1", func(b *testing.B, round int) (time.Duration, *benchFigures) {
			return sourceRun(b, 1, &esdb.Persistent{Group: fmt.Sprintf("bench-p1-%d", round)})
		}},
		{"persistent-2", func(b *testing.B, round int) (time.Duration, *benchFigures) {
			return sourceRun(b, 2, &esdb.Persistent{Group: fmt.Sprintf("bench-p2-%d", round)})
		}},
		{"persistent-2-roundrobin", func(b *testing.B, round int) (time.Duration, *benchFigures) {
			st := esdb.DefaultSettings("")
			st.ConsumerStrategyName = esdbc.ConsumerStrategyRoundRobin
			return sourceRun(b, 2, &esdb.Persistent{Group: fmt.Sprintf("bench-p2r-%d", round), Settings: &st})
		}},
	}
	if *benchOnly != "" {
		keep := strings.Split(*benchOnly, ",")
		variants = slices.DeleteFunc(variants, func(v benchVariant) bool { return !slices.Contains(keep, v.name) })
	}

	rates := benchtest.Rates{}
	round := 0
	for b.Loop() {
		for _, v := range variants {
			took, f := v.run(b, round)
			rate := float64(n) / took.Seconds()
			rates[v.name] = append(rates[v.name], rate)
			line := fmt.Sprintf("round %d %-23s %8.0f events/s  %6.2fs", round, v.name, rate, took.Seconds())
			if f != nil && f.batches > 0 {
				line += fmt.Sprintf("  batches %d, mean fill %.0f%%, workers waiting %.2fs of %.2fs, parked %d, duplicates %d", f.batches,
					100*float64(f.deliveries)/float64(f.batches)/batchSize, f.idle.Seconds(), (time.Duration(workers) * took).Seconds(),
					f.parked, f.duplicates)
			}
			b.Log(line)
		}
		round++
	}
	median, ratio := benchtest.Median, rates.Ratio
	for _, v := range variants {
		b.ReportMetric(median(rates[v.name]), v.name+"-events/s")
		if r, ok := ratio(v.name, "processor"); ok && v.name != "processor" {
			b.ReportMetric(r, v.name+"/processor")
		}
	}
	for _, v := range []string{"persistent-1", "persistent-2", "persistent-2-roundrobin"} {
		if r, ok := ratio(v, "catch-up"); ok {
			b.ReportMetric(r, v+"/catch-up")
		}
	}
	b.ReportMetric(0, "ns/op")
}
