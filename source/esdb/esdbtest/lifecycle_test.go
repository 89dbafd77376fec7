package esdbtest_test

import (
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/gossip"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/persistent"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/inorder/inorder/source/esdb/esdbtest"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func TestSetUnavailable(t *testing.T) {
	t.Parallel()
	s, c := serverClient(t)
	ctx := ctxT(t)
	_, err := c.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{}, jsonEvent("A", `{}`))
	require.NoError(t, err)

	s.SetUnavailable(true)
	_, err = c.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{}, jsonEvent("B", `{}`))
	require.Equal(t, esdb.ErrorUnavailable, esdbCode(t, err), "%v", err)

	// Server features fail too: a new client cannot discover the node.
	c2 := newClientURL(t, s.URL()+"&maxDiscoverAttempts=1")
	_, err = c2.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{}, jsonEvent("B", `{}`))
	require.Equal(t, esdb.ErrorUnavailable, esdbCode(t, err))

	s.SetUnavailable(false)
	// The first client rediscovers the node on its next call.
	_, err = c.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{}, jsonEvent("C", `{}`))
	require.NoError(t, err)
	// The second one gave up discovering: it is closed for good.
	_, err = c2.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{}, jsonEvent("D", `{}`))
	require.Equal(t, esdb.ErrorCodeConnectionClosed, esdbCode(t, err))

	evs, err := readStream(t, c, "order-1", esdb.ReadStreamOptions{}, 10)
	require.NoError(t, err)
	require.Equal(t, []uint64{0, 1}, revisions(evs))
}

func TestStopRestart(t *testing.T) {
	t.Parallel()
	s := esdbtest.New(t)
	addr := s.Addr()
	c := newClient(t, s)
	ctx := ctxT(t)
	_, err := c.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{ExpectedRevision: esdb.NoStream{}}, jsonEvent("A", `{}`))
	require.NoError(t, err)

	sub, err := c.SubscribeToStream(ctx, "order-1", esdb.SubscribeToStreamOptions{From: esdb.Start{}})
	require.NoError(t, err)
	defer sub.Close()
	ch := subEvents(sub)
	nextEvent(t, ch)

	s.Stop()
	for ev := next(t, ch); ev.SubscriptionDropped == nil; ev = next(t, ch) {
	}
	_, err = c.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{}, jsonEvent("B", `{}`))
	require.Equal(t, esdb.ErrorUnavailable, esdbCode(t, err))
	_, err = s.Append("order-1", esdbtest.Event{Type: "WhileDown"}) // direct helpers keep working
	require.NoError(t, err)

	require.NoError(t, s.Restart())
	require.Equal(t, addr, s.Addr())
	require.Error(t, s.Restart(), "already running")

	c2 := newClient(t, s)
	evs, err := readStream(t, c2, "order-1", esdb.ReadStreamOptions{}, 10)
	require.NoError(t, err)
	require.Equal(t, []uint64{0, 1}, revisions(evs))
	require.Equal(t, "WhileDown", evs[1].Event.EventType)

	// The old client recovers too (after at most a failed call).
	eventually(t, func() bool {
		_, err := c.AppendToStream(ctx, "order-1", esdb.AppendToStreamOptions{ExpectedRevision: esdb.Revision(1)}, jsonEvent("C", `{}`))
		return err == nil
	}, "old client reconnects")

	s.Close()
	require.Error(t, s.Restart(), "closed")
}

func TestPersistentRestartResumesFromCheckpoint(t *testing.T) {
	t.Parallel()
	s, c := serverClient(t)
	ctx := ctxT(t)

	// "lazy" keeps the default checkpoint settings (10..1000 events, 2s):
	// it will not have checkpointed 3 events. "eager" checkpoints each ack.
	require.NoError(t, c.CreatePersistentSubscriptionToAll(ctx, "lazy", esdb.PersistentAllSubscriptionOptions{
		StartFrom: esdb.Start{}, Filter: orderFilter(),
	}))
	require.NoError(t, c.CreatePersistentSubscriptionToAll(ctx, "eager", esdb.PersistentAllSubscriptionOptions{
		StartFrom: esdb.Start{}, Filter: orderFilter(),
		Settings: settings(func(st *esdb.PersistentSubscriptionSettings) {
			st.CheckpointLowerBound, st.CheckpointUpperBound = 1, 1
		}),
	}))
	seed(t, s, "order-1", 3)
	for _, group := range []string{"lazy", "eager"} {
		sub, ch := subscribeAll(t, c, group, 10)
		for range 3 {
			require.NoError(t, sub.Ack(nextPS(t, ch).Event))
		}
		eventually(t, func() bool { return s.Outstanding("$all::"+group) == 0 }, "acks processed")
	}
	eventually(t, func() bool { return s.HasCheckpoint("$all::eager") }, "eager checkpoint")
	require.False(t, s.HasCheckpoint("$all::lazy"))

	s.Stop()
	require.NoError(t, s.Restart())
	c2 := newClient(t, s)

	// Like a real node: "lazy" had no checkpoint, it starts over.
	_, lazy := subscribeAll(t, c2, "lazy", 10)
	for i := range 3 {
		ev := nextPS(t, lazy)
		require.EqualValues(t, i, ev.Event.Event.EventNumber)
		require.Equal(t, 0, ev.RetryCount)
	}
	_, eager := subscribeAll(t, c2, "eager", 10)
	seed(t, s, "order-1", 1)
	require.EqualValues(t, 3, nextPS(t, eager).Event.Event.EventNumber)
	require.EqualValues(t, 3, nextPS(t, lazy).Event.Event.EventNumber)
}

func TestUnimplemented(t *testing.T) {
	t.Parallel()
	s := esdbtest.New(t)
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	ctx := ctxT(t)

	_, err = gossip.NewGossipClient(conn).Read(ctx, &shared.Empty{})
	require.Equal(t, codes.Unimplemented, status.Code(err))

	ba, err := streams.NewStreamsClient(conn).BatchAppend(ctx)
	require.NoError(t, err)
	_, err = ba.Recv()
	require.Equal(t, codes.Unimplemented, status.Code(err))

	_, err = persistent.NewPersistentSubscriptionsClient(conn).List(ctx, &persistent.ListReq{})
	require.Equal(t, codes.Unimplemented, status.Code(err))

	s.SetUnavailable(true)
	_, err = gossip.NewGossipClient(conn).Read(ctx, &shared.Empty{})
	require.Equal(t, codes.Unavailable, status.Code(err))
}
