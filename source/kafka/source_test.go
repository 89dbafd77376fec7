package kafka_test

import (
	"cmp"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/kafka"
)

// TestConsume reads 12 partitions into the read model: the fold of the
// stream, duplicates (a producer's retries) absorbed, each partition's
// checkpoint at its end, lag 0.
func TestConsume(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	b := setup(t)
	events := ledger.Generate(rand.New(rand.NewPCG(1, 1)), 200, 4)
	pr := producer(t, c)
	produce(t, pr, events)
	produce(t, pr, events[:300]) // produced again: duplicates at later offsets
	r := start(t, c, b, kafka.Config{})
	requireCaughtUp(t, r.src)
	b.RequireFold(t, events)
	n := b.counts()
	require.EqualValues(t, len(events), n.Applied())
	require.EqualValues(t, 300, n.Deliveries[projection.Duplicate])
	require.NoError(t, r.stop())
	st := r.src.Stats()
	require.EqualValues(t, len(events)+300, st.Acked)
	require.EqualValues(t, testPartitions, st.Assigned)
	require.EqualValues(t, testPartitions, st.Revoked, "a graceful stop hands every partition back")
	require.Empty(t, st.Owned)

	// Live: records produced while the source runs, from the checkpoints.
	more := ledger.Generate(rand.New(rand.NewPCG(2, 2)), 50, 3)
	for i := range more {
		more[i].Aggregate = "live-" + more[i].Aggregate
	}
	r = start(t, c, b, kafka.Config{})
	produce(t, pr, more)
	requireCaughtUp(t, r.src)
	b.RequireFold(t, append(events, more...))
	require.EqualValues(t, len(more), r.src.Stats().Acked, "resumed after its checkpoints: nothing read twice")
}

// TestRejected records hostile records as rejected, in the batch's
// transaction, and never blocks their partition.
func TestRejected(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	b := setup(t)
	events := ledger.Generate(rand.New(rand.NewPCG(3, 3)), 40, 3)
	good := func(i int) *kgo.Record { return kafka.NewRecord(testTopic, events[i]) }
	noKey := good(0)
	noKey.Key = nil
	badVersion := good(1)
	badVersion.Headers[1].Value = []byte("0")
	notJSON := good(2)
	notJSON.Value = []byte("{not json")
	nul := good(3)
	nul.Value = []byte("{\"a\":\"\x00\"}")
	huge := good(4)
	huge.Value = []byte(`{"pad":"` + strings.Repeat("x", 2<<20) + `"}`)
	tombstone := good(5)
	tombstone.Value = nil
	hostile := []*kgo.Record{noKey, badVersion, notJSON, nul, huge}
	for i := range hostile {
		hostile[i].Key = []byte("hostile") // one partition for all of them
		if i == 0 {
			hostile[i].Key = nil
			hostile[i].Partition = 0
		}
	}
	pr, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchMaxBytes(4<<20))
	require.NoError(t, err)
	t.Cleanup(pr.Close)
	require.NoError(t, pr.ProduceSync(t.Context(), append(hostile, tombstone)...).FirstErr())
	produce(t, pr, events)

	r := start(t, c, b, kafka.Config{})
	requireCaughtUp(t, r.src)
	b.RequireFold(t, events)
	require.NoError(t, r.stop())
	st := r.src.Stats()
	require.EqualValues(t, len(hostile), st.Rejected)
	require.EqualValues(t, 1, st.Skipped, "the tombstone")
	rej, err := b.Proc.Rejected(t.Context(), projection.ListOptions{})
	require.NoError(t, err)
	require.Len(t, rej, len(hostile))
	reasons := map[string]int{}
	for _, x := range rej {
		reasons[x.Reason]++
		require.Equal(t, "kafka", x.Source)
	}
	for _, reason := range []string{aggregate.Reason(aggregate.ErrEmptyAggregate), aggregate.Reason(aggregate.ErrBadVersion), aggregate.Reason(aggregate.ErrInvalidJSON), aggregate.Reason(aggregate.ErrPayloadTooLarge)} {
		require.Positive(t, reasons[reason], "reason %s in %v", reason, reasons)
	}
}

// TestExclusive: with the aggregate read from the record's key (the default
// mapping), no other member of the group holds a batch's aggregates, and
// the source says so to the processor (source.Config.Exclusive); with the
// aggregate read from a header, records of one aggregate may sit in any
// partition, and it does not.
func TestExclusive(t *testing.T) {
	t.Parallel()
	for _, m := range []kafka.Mapping{{}, {Aggregate: "header:" + kafka.HeaderAggregate}} {
		t.Run(cmp.Or(m.Aggregate, "key"), func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			b := setup(t)
			var marks *ledgertest.Marks
			b.Proc, marks = b.MarkedProcessor(t)
			events := ledger.Generate(rand.New(rand.NewPCG(3, 1)), 50, 4)
			produce(t, producer(t, c), events)
			r := start(t, c, b, kafka.Config{Mapping: m})
			requireCaughtUp(t, r.src)
			b.RequireFold(t, events)
			require.NoError(t, r.stop())
			marks.RequireMarked(t, m.Aggregate == "")
		})
	}
}
