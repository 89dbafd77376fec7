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
	_, err := b.proc.Process(t.Context(), projection.Batch{Events: events[:len(events)/3]})
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(t.Context(), `UPDATE ledger_balances SET balance = balance + 1`)
	require.NoError(t, err)

	r, err := kafka.NewReplayer(&kafka.Config{Brokers: c.ListenAddrs(), Topics: []string{testTopic}, Workers: 3, BatchSize: 16})
	require.NoError(t, err)
	require.NoError(t, r.Check(t.Context()))
	require.NoError(t, b.proc.Rebuild(t.Context(), "ledger", r.Replay, nil))
	b.requireFold(t, events)
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
