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
	sourceRun := func(topic string, round, consumers, workers int) time.Duration {
		bs := setup(b)
		group := fmt.Sprintf("bench-%s-%d-%d", topic, consumers, round)
		wait := func(cond func() bool) { waitFor(b, "every event applied", cond) }
		return benchtest.SourceRun(b, bs.Bundle, consumers, events, wait, func(_ int, p *projection.Processor) func() error {
			rb := &bundle{&ledgertest.Bundle{DB: bs.DB, Proc: p}}
			return start(b, c, rb, kafka.Config{Topics: []string{topic}, Group: group, Workers: workers, BatchSize: batchSize, MaxWait: 20 * time.Millisecond, LagEvery: -1}).stop
		})
	}
	names := []string{shapes[0].name, shapes[1].name}
	rates := benchtest.Rounds(b, n, names,
		benchtest.Variant{Name: "processor", Run: func(sh, _ int) time.Duration {
			return benchtest.Baseline(b, setup(b).Proc, shapes[sh].stream, batchSize, n)
		}},
		benchtest.Variant{Name: "kafka-1", Run: func(sh, round int) time.Duration { return sourceRun(names[sh], round, 1, 4) }},
		benchtest.Variant{Name: "kafka-3", Run: func(sh, round int) time.Duration { return sourceRun(names[sh], round, 3, 2) }},
	)
	rates.Report(b, names, []string{"processor", "kafka-1", "kafka-3"},
		[2]string{"kafka-1", "processor"}, [2]string{"kafka-3", "processor"}, [2]string{"kafka-3", "kafka-1"})
}
