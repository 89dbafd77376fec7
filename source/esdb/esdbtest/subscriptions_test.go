package esdbtest_test

import (
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/inorder/inorder/source/esdb/esdbtest"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestSubscribeToAllFiltered(t *testing.T) {
	t.Parallel()
	s, c := serverClient(t)

	// History: 3 matching events among 10 others.
	seed(t, s, "noise-1", 4)
	seed(t, s, "order-1", 2)
	seed(t, s, "noise-2", 6)
	seed(t, s, "order-2", 1)

	sub, err := c.SubscribeToAll(ctxT(t), esdb.SubscribeToAllOptions{
		From:               esdb.Start{},
		Filter:             &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{"order-"}},
		MaxSearchWindow:    2,
		CheckpointInterval: 2, // checkpoint every 4 scanned events
	})
	require.NoError(t, err)
	defer sub.Close()
	require.NotEmpty(t, sub.Id())
	ch := subEvents(sub)

	var (
		got         []string
		checkpoints []esdb.Position
		lastPos     uint64
	)
	for caughtUp := false; !caughtUp; {
		ev := next(t, ch)
		require.Nil(t, ev.SubscriptionDropped)
		switch {
		case ev.EventAppeared != nil:
			e := ev.EventAppeared.Event
			got = append(got, e.StreamID)
			require.Greater(t, e.Position.Commit, lastPos)
			lastPos = e.Position.Commit
		case ev.CheckPointReached != nil:
			checkpoints = append(checkpoints, *ev.CheckPointReached)
		case ev.CaughtUp != nil:
			caughtUp = true
		}
	}
	require.Equal(t, []string{"order-1", "order-1", "order-2"}, got)
	// 13 scanned events: checkpoints after 4, 8, 12, and one at catch-up.
	require.Len(t, checkpoints, 4)
	for i := 1; i < len(checkpoints); i++ {
		require.Greater(t, checkpoints[i].Commit, checkpoints[i-1].Commit)
	}
	require.Equal(t, lastPos, checkpoints[3].Commit, "the catch-up checkpoint is the last scanned event")

	// Live events, filtered.
	seed(t, s, "noise-3", 1)
	_, err = s.Append("order-3", esdbtest.Event{Type: "Live", Data: []byte(`{}`)})
	require.NoError(t, err)
	live := nextEvent(t, ch)
	require.Equal(t, "order-3", live.Event.StreamID)
	require.Equal(t, "Live", live.Event.EventType)

	// Event type filter with a regex.
	sub2, err := c.SubscribeToAll(ctxT(t), esdb.SubscribeToAllOptions{
		From:   esdb.Start{},
		Filter: &esdb.SubscriptionFilter{Type: esdb.EventFilterType, Regex: "^Li"},
	})
	require.NoError(t, err)
	defer sub2.Close()
	require.Equal(t, "order-3", nextEvent(t, subEvents(sub2)).Event.StreamID)
}

func TestSubscribeExcludesStart(t *testing.T) {
	t.Parallel()
	s, c := serverClient(t)
	seed(t, s, "order-1", 3)

	rs, err := c.ReadAll(ctxT(t), esdb.ReadAllOptions{}, 10)
	all, err := readAll(t, rs, err)
	require.NoError(t, err)
	require.Len(t, all, 3)

	// $all from a position: that position is excluded.
	sub, err := c.SubscribeToAll(ctxT(t), esdb.SubscribeToAllOptions{From: all[0].Event.Position})
	require.NoError(t, err)
	defer sub.Close()
	ch := subEvents(sub)
	require.Equal(t, all[1].Event.EventID, nextEvent(t, ch).Event.EventID)
	require.Equal(t, all[2].Event.EventID, nextEvent(t, ch).Event.EventID)

	// Stream from a revision: that revision is excluded; then caught up and live.
	ssub, err := c.SubscribeToStream(ctxT(t), "order-1", esdb.SubscribeToStreamOptions{From: esdb.Revision(1)})
	require.NoError(t, err)
	defer ssub.Close()
	sch := subEvents(ssub)
	require.EqualValues(t, 2, next(t, sch).EventAppeared.Event.EventNumber)
	require.NotNil(t, next(t, sch).CaughtUp)

	// From the end: only new events.
	esub, err := c.SubscribeToStream(ctxT(t), "order-1", esdb.SubscribeToStreamOptions{From: esdb.End{}})
	require.NoError(t, err)
	defer esub.Close()
	ech := subEvents(esub)
	require.NotNil(t, next(t, ech).CaughtUp)

	seed(t, s, "order-1", 1)
	require.EqualValues(t, 3, nextEvent(t, sch).Event.EventNumber)
	require.EqualValues(t, 3, nextEvent(t, ech).Event.EventNumber)
	require.EqualValues(t, 3, nextEvent(t, ch).Event.EventNumber)

	// From the start of a stream that does not exist yet: waits for it.
	nsub, err := c.SubscribeToStream(ctxT(t), "later", esdb.SubscribeToStreamOptions{From: esdb.Start{}})
	require.NoError(t, err)
	defer nsub.Close()
	nch := subEvents(nsub)
	require.NotNil(t, next(t, nch).CaughtUp)
	seed(t, s, "later", 1)
	require.EqualValues(t, 0, nextEvent(t, nch).Event.EventNumber)
}

func TestDropSubscriptions(t *testing.T) {
	t.Parallel()
	s, c := serverClient(t)
	ctx := ctxT(t)
	seed(t, s, "order-1", 1)

	sub, err := c.SubscribeToAll(ctx, esdb.SubscribeToAllOptions{From: esdb.Start{}})
	require.NoError(t, err)
	defer sub.Close()
	ch := subEvents(sub)
	nextEvent(t, ch)

	require.NoError(t, c.CreatePersistentSubscriptionToAll(ctx, "g", esdb.PersistentAllSubscriptionOptions{StartFrom: esdb.Start{}}))
	psub, err := c.SubscribeToPersistentSubscriptionToAll(ctx, "g", esdb.SubscribeToPersistentSubscriptionOptions{})
	require.NoError(t, err)
	defer psub.Close()
	pch := psEvents(psub)
	nextPS(t, pch)

	s.DropSubscriptions()

	for {
		ev := next(t, ch)
		if ev.SubscriptionDropped != nil {
			require.Equal(t, codes.Unavailable, status.Code(ev.SubscriptionDropped.Error))
			break
		}
	}
	pev := next(t, pch)
	require.NotNil(t, pev.SubscriptionDropped)
	require.Equal(t, codes.Unavailable, status.Code(pev.SubscriptionDropped.Error))

	// The same client can subscribe again; the unacked event comes back.
	psub2, err := c.SubscribeToPersistentSubscriptionToAll(ctx, "g", esdb.SubscribeToPersistentSubscriptionOptions{})
	require.NoError(t, err)
	defer psub2.Close()
	again := nextPS(t, psEvents(psub2))
	require.Equal(t, 1, again.RetryCount)
}
