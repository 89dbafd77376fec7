package kafka_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/inorder/inorder/internal/benchtest"
	"github.com/inorder/inorder/internal/ledgertest"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/kafka"
)

var (
	benchPayments = flag.Int("kafka.payments", 5000, "BenchmarkKafka: payments (events = payments × 6)")
)

// BenchmarkKafka measures the source end to end — kfake brokers (3, 12
// partitions), the real client, the ledger projection — beside the
// processor alone fed the same records, partitioned by aggregate over 4
// goroutines, in batches of 500, in order. Two workload shapes, each on its
// own topic: "ordered" (each event once) and "copies" (every event produced
// twice, the copy later in its partition: half the deliveries are
// duplicates the gate discards). Each round runs, per shape, on a fresh
// schema each:
//
//   - processor: Processor.Process alone, 4 goroutines;
//   - kafka-1: one Source, 4 workers;
//   - kafka-3: three Sources in one group (as three processes would be:
//     each its own processor and client), 2 workers each.
//
// It reports each variant's events/s (median over the rounds) and the
// median ratio to the processor alone in the same round (target ≥ 0.7×),
// and kafka-3 to kafka-1.
//
//	go test -run '^$' -bench BenchmarkKafka -benchtime 3x -v ./source/kafka/
func BenchmarkKafka(b *testing.B) {
	const batchSize = 500
	c := newCluster(b)
	pr, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchMaxBytes(1<<20))
	require.NoError(b, err)
	b.Cleanup(pr.Close)
	events := ledger.Generate(rand.New(rand.NewPCG(42, 42)), *benchPayments, 6)
	shapes := []struct {
		name   string
		stream []aggregate.Event
	}{
		{"ordered", events},
		{"copies", append(slices.Clone(events), events...)},
	}
	for _, sh := range shapes {
		_, err := kadm.NewClient(pr).CreateTopic(b.Context(), testPartitions, 1, nil, sh.name)
		require.NoError(b, err)
		rs := make([]*kgo.Record, len(sh.stream))
		for i, e := range sh.stream {
			rs[i] = kafka.NewRecord(sh.name, e)
		}
		for chunk := range slices.Chunk(rs, 5000) {
			require.NoError(b, pr.ProduceSync(b.Context(), chunk...).FirstErr())
		}
	}
	n := len(events)
	processorRun := func(b *testing.B, stream []aggregate.Event) time.Duration {
		bp := setup(b)
		took := benchtest.ProcessAll(b, bp.Proc, benchtest.Partition(stream, 4), batchSize)
		require.EqualValues(b, n, bp.Proc.Counts()["ledger"].Applied())
		return took
	}
	round := 0
	sourceRun := func(b *testing.B, topic string, consumers, workers int) time.Duration {
		bs := setup(b)
		procs := []*projection.Processor{bs.Proc}
		for len(procs) < consumers {
			p, err := projection.New(bs.DB.Pool, &projection.Config{Schema: bs.DB.Schema}, ledger.New(nil))
			require.NoError(b, err)
			procs = append(procs, p)
		}
		group := fmt.Sprintf("bench-%s-%d-%d", topic, consumers, round)
		began := time.Now()
		var rs []*running
		for _, p := range procs {
			rb := &bundle{&ledgertest.Bundle{DB: bs.DB, Proc: p}}
			rs = append(rs, start(b, c, rb, kafka.Config{Topics: []string{topic}, Group: group, Workers: workers, BatchSize: batchSize, MaxWait: 20 * time.Millisecond, LagEvery: -1}))
		}
		waitFor(b, "every event applied", func() bool {
			var a int64
			for _, p := range procs {
				a += p.Counts()["ledger"].Applied()
			}
			return a >= int64(n)
		})
		took := time.Since(began)
		for _, r := range rs {
			require.NoError(b, r.stop())
		}
		b.StopTimer()
		bs.RequireFold(b, events)
		b.StartTimer()
		return took
	}
	rates := benchtest.Rates{}
	for b.Loop() {
		for _, sh := range shapes {
			for _, v := range []struct {
				name string
				run  func() time.Duration
			}{
				{"processor", func() time.Duration { return processorRun(b, sh.stream) }},
				{"kafka-1", func() time.Duration { return sourceRun(b, sh.name, 1, 4) }},
				{"kafka-3", func() time.Duration { return sourceRun(b, sh.name, 3, 2) }},
			} {
				took := v.run()
				key := sh.name + "/" + v.name
				rate := float64(n) / took.Seconds()
				rates[key] = append(rates[key], rate)
				b.Logf("round %d %-20s %8.0f events/s  %6.2fs", round, key, rate, took.Seconds())
			}
		}
		round++
	}
	median := benchtest.Median
	ratio := func(a, base string) float64 { r, _ := rates.Ratio(a, base); return r }
	for _, sh := range shapes {
		for _, v := range []string{"processor", "kafka-1", "kafka-3"} {
			b.ReportMetric(median(rates[sh.name+"/"+v]), sh.name+"/"+v+"-events/s")
		}
		b.ReportMetric(ratio(sh.name+"/kafka-1", sh.name+"/processor"), sh.name+"/kafka-1/processor")
		b.ReportMetric(ratio(sh.name+"/kafka-3", sh.name+"/processor"), sh.name+"/kafka-3/processor")
		b.ReportMetric(ratio(sh.name+"/kafka-3", sh.name+"/kafka-1"), sh.name+"/kafka-3/kafka-1")
	}
	b.ReportMetric(0, "ns/op")
}
