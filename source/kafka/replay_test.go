package kafka_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/kafka"
)

// TestReplay rebuilds a projection from the topic's start; and refuses, with
// a reason, once retention removed some of it.
func TestReplay(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	b := setup(t)
	pr := producer(t, c)
	events := ledger.Generate(rand.New(rand.NewPCG(6, 6)), 80, 4)
	produce(t, pr, events)
	produce(t, pr, events[:50]) // copies: absorbed
	// The read model is wrong before the rebuild.
	_, err := b.Proc.Process(t.Context(), projection.Batch{Events: events[:len(events)/3]})
	require.NoError(t, err)
	_, err = b.DB.Pool.Exec(t.Context(), `UPDATE ledger_balances SET balance = balance + 1`)
	require.NoError(t, err)

	r, err := kafka.NewReplayer(&kafka.Config{Brokers: c.ListenAddrs(), Topics: []string{testTopic}, Workers: 3, BatchSize: 16})
	require.NoError(t, err)
	require.NoError(t, r.Check(t.Context()))
	_, err = b.Proc.Build(t.Context(), "ledger", &projection.BuildOptions{InPlace: true, Replay: r.Replay})
	require.NoError(t, err)
	b.RequireFold(t, events)
	require.Equal(t, kafka.ReplayProgress{Read: int64(len(events) + 50), Total: int64(len(events) + 50)}, r.Progress())

	adm := kadm.NewClient(pr)
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: testTopic, Partition: 3, At: 1})
	resp, err := adm.DeleteRecords(t.Context(), del)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	err = r.Check(t.Context())
	require.ErrorIs(t, err, kafka.ErrTruncated)
	require.ErrorContains(t, err, "partition payments/3 starts at offset 1: offsets 0-0 were removed")
	// Replay says so too, before it emits anything (a rebuild in place
	// has emptied the read model by then: check first).
	emitted := 0
	err = r.Replay(t.Context(), func(_ context.Context, es []aggregate.Event) error { emitted += len(es); return nil })
	require.ErrorIs(t, err, kafka.ErrTruncated)
	require.Zero(t, emitted)
}

// TestStream reads the topic as a side-by-side rebuild does: to its end,
// then from the position of the last batch on, only what came after.
func TestStream(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	pr := producer(t, c)
	events := ledger.Generate(rand.New(rand.NewPCG(12, 12)), 40, 3)
	first := len(events) / 2
	produce(t, pr, events[:first])
	r, err := kafka.NewReplayer(&kafka.Config{Brokers: c.ListenAddrs(), Topics: []string{testTopic}, BatchSize: 10})
	require.NoError(t, err)
	var _ projection.Stream = r
	read := func(from projection.Position) ([]aggregate.Event, projection.Position) {
		var got []aggregate.Event
		last := from
		require.NoError(t, r.Read(t.Context(), from, func(_ context.Context, sb projection.StreamBatch) error {
			got = append(got, sb.Events...)
			require.Empty(t, sb.Rejects)
			last = sb.Position
			return nil
		}))
		return got, last
	}
	got, pos := read(nil)
	require.ElementsMatch(t, ids(events[:first]), ids(got))
	produce(t, pr, events[first:])
	got, pos = read(pos)
	require.ElementsMatch(t, ids(events[first:]), ids(got), "from a position: only what follows it")
	got, _ = read(pos)
	require.Empty(t, got, "at the end: nothing")
}

func ids(es []aggregate.Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.StableID()
	}
	return out
}
