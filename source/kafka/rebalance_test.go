package kafka_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/kafka"
)

// TestHandoverDrains moves partitions between members while records flow:
// a member joins (partitions move to it), another leaves. Each member
// commits what it holds of a partition before giving it up, and the next
// starts right after that checkpoint: not one record is processed twice.
func TestHandoverDrains(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	b := setup(t)
	pr := producer(t, c)
	events := ledger.Generate(rand.New(rand.NewPCG(4, 4)), 300, 4)
	third := len(events) / 3
	a := start(t, c, b, kafka.Config{Workers: 2, BatchSize: 20})
	produce(t, pr, events[:third])
	waitFor(t, "a share applied", func() bool { return b.counts().Applied() >= int64(third/2) })

	joined := make(chan []kafka.Partition, 1)
	bb := start(t, c, b, kafka.Config{Workers: 2, BatchSize: 20, OnAssigned: func(ps []kafka.Partition) {
		select {
		case joined <- ps:
		default:
		}
	}})
	produce(t, pr, events[third:2*third])
	got := <-joined
	require.NotEmpty(t, got)
	waitFor(t, "two thirds applied", func() bool { return b.counts().Applied() >= int64(2*third) })
	require.NoError(t, a.stop(), "the member that leaves drains")
	produce(t, pr, events[2*third:])
	requireCaughtUp(t, bb.src)
	b.RequireFold(t, events)

	n := b.counts()
	require.EqualValues(t, len(events), n.Applied())
	require.Zero(t, n.Deliveries[projection.Duplicate], "a drained handover repeats nothing")
	require.Zero(t, n.Deliveries[projection.Parked])
	sa := a.src.Stats()
	require.EqualValues(t, testPartitions, sa.Revoked, "a gave up all its partitions: some to b when it joined, the rest when it left")
	require.Zero(t, sa.Lost)
	require.EqualValues(t, testPartitions, bb.src.Stats().Assigned)
}

// TestTruncated finds the records retention removed before the source read
// them: counted, and their aggregates' later versions parked, not applied.
func TestTruncated(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	b := setup(t)
	pr := producer(t, c)
	events := ledger.Generate(rand.New(rand.NewPCG(5, 5)), 60, 3)
	produce(t, pr, events)
	adm := kadm.NewClient(pr)
	ends, err := adm.ListEndOffsets(t.Context(), testTopic)
	require.NoError(t, err)
	var dropped int64
	del := kadm.Offsets{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Partition%3 == 0 && o.Offset > 2 {
			del.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: 2})
			dropped += 2
		}
	})
	require.Positive(t, dropped)
	resp, err := adm.DeleteRecords(t.Context(), del)
	require.NoError(t, err)
	require.NoError(t, resp.Error())

	r := start(t, c, b, kafka.Config{})
	requireCaughtUp(t, r.src)
	require.Equal(t, dropped, r.src.Stats().Truncated)
	n := b.counts()
	require.EqualValues(t, int64(len(events))-dropped, n.Applied()+n.Deliveries[projection.Parked])
	require.Positive(t, n.Deliveries[projection.Parked], "versions after the removed ones wait for them")
}
