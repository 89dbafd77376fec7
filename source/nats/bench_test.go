package nats_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/inorder/inorder/internal/benchtest"

	"github.com/google/uuid"
	natsc "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/nats"
	"github.com/inorder/inorder/source/nats/natstest"
)

var benchPayments = flag.Int("nats.payments", 5000, "BenchmarkNATS: payments (events = payments × 6)")

// BenchmarkNATS measures the source end to end — an in-process NATS server
// (one node, file storage), the real client, the ledger projection —
// beside the processor alone fed the same events, partitioned by aggregate
// over 4 goroutines, in batches of 500, in order. Two workload shapes, each
// on a stream of its own: "ordered" (each event once) and "copies" (every
// event published twice, the copy later and with a Nats-Msg-Id of its own
// so that the duplicate window lets it through: half the deliveries are
// duplicates the gate discards). Each round runs, per shape, on a fresh
// schema each:
//
//   - processor: Processor.Process alone, 4 goroutines;
//   - nats-1: one Source, 4 workers;
//   - nats-3: three Sources on one durable consumer (as three processes
//     would be: each its own processor and connection), 2 workers each;
//   - nats-3-parted: three Sources as nats-3, each on a durable consumer of
//     its own that filters one of three partitions of a stream whose
//     subject transform adds partition(3) of the aggregate token: an
//     aggregate has one reader, as a Kafka partition gives (the deployment
//     docs/nats.md recommends to scale out).
//
// It reports each variant's events/s (median over the rounds) and the
// median ratio to the processor alone in the same round (target ≥ 0.7×),
// and nats-3 and nats-3-parted to nats-1.
//
//	go test -run '^$' -bench BenchmarkNATS -benchtime 3x -v ./source/nats/
func BenchmarkNATS(b *testing.B) {
	const batchSize = 500
	srv := natstest.New(b)
	nc, err := natsc.Connect(srv.URL())
	require.NoError(b, err)
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	events := ledger.Generate(rand.New(rand.NewPCG(42, 42)), *benchPayments, 6)
	shapes := []struct {
		name   string
		stream []aggregate.Event
		copies bool
	}{
		{"ordered", events, false},
		{"copies", append(slices.Clone(events), events...), true},
	}
	for _, sh := range shapes {
		_, err := js.CreateStream(b.Context(), jetstream.StreamConfig{Name: sh.name, Subjects: []string{sh.name + ".>"}, Storage: jetstream.FileStorage})
		require.NoError(b, err)
		// The same messages on a partitioned stream: "<name>p.<aggregate>"
		// is stored as "<name>p.<partition>.<aggregate>".
		parted := sh.name + "p"
		_, err = js.CreateStream(b.Context(), jetstream.StreamConfig{
			Name: parted, Subjects: []string{parted + ".*"}, Storage: jetstream.FileStorage,
			SubjectTransform: &jetstream.SubjectTransformConfig{Source: parted + ".*", Destination: parted + ".{{partition(3,1)}}.{{wildcard(1)}}"},
		})
		require.NoError(b, err)
		for i, e := range sh.stream {
			var copyID string
			if sh.copies && i >= len(events) {
				copyID = uuid.NewString()
			}
			for _, stream := range []string{sh.name, parted} {
				m, err := nats.NewMsg(stream+"."+e.Aggregate, e)
				require.NoError(b, err)
				m.Header.Set("Event-Id", e.StableID())
				if copyID != "" {
					m.Header.Set(natsc.MsgIdHdr, copyID)
				}
				_, err = js.PublishMsgAsync(m)
				require.NoError(b, err)
			}
			if i%2000 == 1999 {
				<-js.PublishAsyncComplete()
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(waitTimeout):
			b.Fatal("publishes not acknowledged")
		}
		for _, stream := range []string{sh.name, parted} {
			info, err := js.Stream(b.Context(), stream)
			require.NoError(b, err)
			require.EqualValues(b, len(sh.stream), info.CachedInfo().State.Msgs, "every message stored in %s", stream)
		}
	}
	n := len(events)
	// sourceRun runs consumers Sources on stream, on one durable consumer,
	// or, parted, each on its own partition's.
	sourceRun := func(stream string, round, consumers, workers int, parted bool) time.Duration {
		consumer := fmt.Sprintf("bench-%s-%d-%d", stream, consumers, round)
		wait := func(cond func() bool) { waitFor(b, ticks(b, 5*time.Millisecond), cond, "every event applied") }
		return benchtest.SourceRun(b, setup(b).Bundle, consumers, events, wait, func(i int, p *projection.Processor) func() error {
			cfg := nats.Config{
				URL: srv.URL(), Stream: stream, Consumer: consumer, Processor: p, Mapping: nats.Mapping{ID: "header:Event-Id"},
				Workers: workers, BatchSize: batchSize, MaxWait: 20 * time.Millisecond, LagEvery: -1,
			}
			if parted {
				cfg.Consumer = fmt.Sprintf("%s-p%d", consumer, i)
				cfg.Subjects = []string{fmt.Sprintf("%s.%d.*", stream, i)}
			}
			return start(b, cfg).stop
		})
	}
	names := []string{shapes[0].name, shapes[1].name}
	rates := benchtest.Rounds(b, n, names,
		benchtest.Variant{Name: "processor", Run: func(sh, _ int) time.Duration {
			return benchtest.Baseline(b, setup(b).Proc, shapes[sh].stream, batchSize, n)
		}},
		benchtest.Variant{Name: "nats-1", Run: func(sh, round int) time.Duration { return sourceRun(names[sh], round, 1, 4, false) }},
		benchtest.Variant{Name: "nats-3", Run: func(sh, round int) time.Duration { return sourceRun(names[sh], round, 3, 2, false) }},
		benchtest.Variant{Name: "nats-3-parted", Run: func(sh, round int) time.Duration { return sourceRun(names[sh]+"p", round, 3, 2, true) }},
	)
	rates.Report(b, names, []string{"processor", "nats-1", "nats-3", "nats-3-parted"},
		[2]string{"nats-1", "processor"}, [2]string{"nats-3", "processor"}, [2]string{"nats-3", "nats-1"},
		[2]string{"nats-3-parted", "processor"}, [2]string{"nats-3-parted", "nats-1"})
}
