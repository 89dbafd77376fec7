package esdbtest_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	"github.com/inorder/inorder/source/esdb/esdbtest"
	"github.com/stretchr/testify/require"
)

func orderFilter() *esdb.SubscriptionFilter {
	return &esdb.SubscriptionFilter{Type: esdb.StreamFilterType, Prefixes: []string{"order-"}}
}

func settings(mod func(*esdb.PersistentSubscriptionSettings)) *esdb.PersistentSubscriptionSettings {
	st := esdb.SubscriptionSettingsDefault()
	if mod != nil {
		mod(&st)
	}
	return &st
}

func subscribeAll(t *testing.T, c *esdb.Client, group string, buffer uint32) (*esdb.PersistentSubscription, <-chan *esdb.PersistentSubscriptionEvent) {
	t.Helper()
	sub, err := c.SubscribeToPersistentSubscriptionToAll(ctxT(t), group, esdb.SubscribeToPersistentSubscriptionOptions{BufferSize: buffer})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Close() })
	return sub, psEvents(sub)
}

func TestPersistentManagement(t *testing.T) {
	t.Parallel()
	_, c := serverClient(t)
	ctx := ctxT(t)

	require.NoError(t, c.CreatePersistentSubscriptionToAll(ctx, "g", esdb.PersistentAllSubscriptionOptions{Filter: orderFilter()}))
	err := c.CreatePersistentSubscriptionToAll(ctx, "g", esdb.PersistentAllSubscriptionOptions{})
	require.Equal(t, esdb.ErrorCodeResourceAlreadyExists, esdbCode(t, err))

	_, err = c.SubscribeToPersistentSubscriptionToAll(ctx, "missing", esdb.SubscribeToPersistentSubscriptionOptions{})
	require.Equal(t, esdb.ErrorCodeResourceNotFound, esdbCode(t, err))

	// Update and delete drop connected consumers.
	_, ch := subscribeAll(t, c, "g", 10)
	require.NoError(t, c.UpdatePersistentSubscriptionToAll(ctx, "g", esdb.PersistentAllSubscriptionOptions{Settings: settings(nil)}))
	require.NotNil(t, next(t, ch).SubscriptionDropped)
	_, ch = subscribeAll(t, c, "g", 10)
	require.NoError(t, c.DeletePersistentSubscriptionToAll(ctx, "g", esdb.DeletePersistentSubscriptionOptions{}))
	require.NotNil(t, next(t, ch).SubscriptionDropped)
	err = c.DeletePersistentSubscriptionToAll(ctx, "g", esdb.DeletePersistentSubscriptionOptions{})
	require.Equal(t, esdb.ErrorCodeResourceNotFound, esdbCode(t, err))
}

func TestPersistentRoundRobinAckNack(t *testing.T) {
	t.Parallel()
	s, c := serverClient(t)
	ctx := ctxT(t)
	seed(t, s, "noise", 2)

	require.NoError(t, c.CreatePersistentSubscriptionToAll(ctx, "rr", esdb.PersistentAllSubscriptionOptions{
		StartFrom: esdb.Start{},
		Filter:    orderFilter(),
		Settings:  settings(func(st *esdb.PersistentSubscriptionSettings) { st.MaxRetryCount = 2 }),
	}))
	subs := make([]*esdb.PersistentSubscription, 3)
	chs := make([]<-chan *esdb.PersistentSubscriptionEvent, 3)
	for i := range subs {
		subs[i], chs[i] = subscribeAll(t, c, "rr", 10)
	}

	// 9 events appended at once are dealt round robin: 0,3,6 / 1,4,7 / 2,5,8.
	ids := make([]uuid.UUID, 9)
	events := make([]esdbtest.Event, 9)
	for i := range events {
		ids[i] = uuid.New()
		events[i] = esdbtest.Event{ID: ids[i], Type: "Placed", Data: []byte(`{}`)}
	}
	_, err := s.Append("order-1", events...)
	require.NoError(t, err)
	for i := range 9 {
		ev := nextPS(t, chs[i%3])
		require.Equal(t, ids[i], ev.Event.OriginalEvent().EventID, "event %d", i)
		require.Equal(t, 0, ev.RetryCount)
		require.NotNil(t, ev.Event.Commit)
		if i >= 3 {
			require.NoError(t, subs[i%3].Ack(ev.Event))
		} else {
			switch i {
			case 0: // nack retry: redelivered with retry count 1
				require.NoError(t, subs[0].Nack("retry", esdb.NackActionRetry, ev.Event))
			case 1: // nack park: parked at once
				require.NoError(t, subs[1].Nack("bad", esdb.NackActionPark, ev.Event))
			case 2: // nack skip: gone
				require.NoError(t, subs[2].Nack("skip", esdb.NackActionSkip, ev.Event))
			}
		}
	}

	// Event 0 comes back (to whichever consumer is next) with retry count 1,
	// and keeps coming back until MaxRetryCount (2) is exhausted: parked.
	for retry := 1; retry <= 2; retry++ {
		var got *esdb.EventAppeared
		var from int
		select {
		case ev := <-chs[0]:
			got, from = ev.EventAppeared, 0
		case ev := <-chs[1]:
			got, from = ev.EventAppeared, 1
		case ev := <-chs[2]:
			got, from = ev.EventAppeared, 2
		case <-time.After(waitTimeout):
			t.Fatal("no redelivery")
		}
		require.NotNil(t, got)
		require.Equal(t, ids[0], got.Event.OriginalEvent().EventID)
		require.Equal(t, retry, got.RetryCount)
		require.NoError(t, subs[from].Nack("again", esdb.NackActionRetry, got.Event))
	}

	// Parked: event 1 (explicit park) and event 0 (max retries), as links.
	// The nacks came on different streams, so either may be parked first.
	parked := "$persistentsubscription-$all::rr-parked"
	eventually(t, func() bool {
		evs, err := readStream(t, c, parked, esdb.ReadStreamOptions{}, 10)
		return err == nil && len(evs) == 2
	}, "two parked messages")
	evs, err := readStream(t, c, parked, esdb.ReadStreamOptions{ResolveLinkTos: true}, 10)
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{ids[0], ids[1]}, []uuid.UUID{evs[0].Event.EventID, evs[1].Event.EventID})
	for _, ev := range evs {
		require.Equal(t, "$>", ev.Link.EventType)
		require.Equal(t, parked, ev.Link.StreamID)
	}
	require.Equal(t, 0, s.Outstanding("$all::rr"))

	for _, ch := range chs {
		nothingWithin(t, ch, 50*time.Millisecond)
	}
}

func TestPersistentRedelivery(t *testing.T) {
	t.Parallel()
	s, c := serverClient(t)
	ctx := ctxT(t)

	require.NoError(t, c.CreatePersistentSubscriptionToAll(ctx, "g", esdb.PersistentAllSubscriptionOptions{
		StartFrom: esdb.Start{},
		Filter:    orderFilter(),
		Settings: settings(func(st *esdb.PersistentSubscriptionSettings) {
			st.MessageTimeout = 300 // ms
		}),
	}))

	// Consumer disconnect: A's unacked event goes to B with retry count 1.
	subA, chA := subscribeAll(t, c, "g", 10)
	seed(t, s, "order-1", 1)
	first := nextPS(t, chA)
	require.Equal(t, 0, first.RetryCount)
	subB, chB := subscribeAll(t, c, "g", 10)
	require.NoError(t, subA.Close())
	again := nextPS(t, chB)
	require.Equal(t, first.Event.Event.EventID, again.Event.Event.EventID)
	require.Equal(t, 1, again.RetryCount)
	require.NoError(t, subB.Ack(again.Event))

	// Message timeout: not acked within 300ms, delivered again.
	seed(t, s, "order-2", 1)
	ev := nextPS(t, chB)
	start := time.Now()
	require.Equal(t, 0, ev.RetryCount)
	ev2 := nextPS(t, chB)
	require.Equal(t, ev.Event.Event.EventID, ev2.Event.Event.EventID)
	require.Equal(t, 1, ev2.RetryCount)
	require.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond)
	require.NoError(t, subB.Ack(ev2.Event))
	eventually(t, func() bool { return s.Outstanding("$all::g") == 0 }, "acked")
	nothingWithin(t, chB, 400*time.Millisecond) // acked: no more timeouts
}

func TestPersistentBufferSize(t *testing.T) {
	t.Parallel()
	s, c := serverClient(t)
	ctx := ctxT(t)
	require.NoError(t, c.CreatePersistentSubscription(ctx, "order-1", "g", esdb.PersistentStreamSubscriptionOptions{StartFrom: esdb.Start{}}))
	seed(t, s, "order-1", 5)

	sub, err := c.SubscribeToPersistentSubscription(ctx, "order-1", "g", esdb.SubscribeToPersistentSubscriptionOptions{BufferSize: 2})
	require.NoError(t, err)
	defer sub.Close()
	ch := psEvents(sub)
	e0, e1 := nextPS(t, ch), nextPS(t, ch)
	require.EqualValues(t, 0, e0.Event.Event.EventNumber)
	require.EqualValues(t, 1, e1.Event.Event.EventNumber)
	nothingWithin(t, ch, 50*time.Millisecond) // 2 in flight: buffer full
	require.NoError(t, sub.Ack(e0.Event))
	require.EqualValues(t, 2, nextPS(t, ch).Event.Event.EventNumber)

	// Start from a revision (inclusive) on a second group; live events follow.
	require.NoError(t, c.CreatePersistentSubscription(ctx, "order-1", "from3", esdb.PersistentStreamSubscriptionOptions{StartFrom: esdb.Revision(3)}))
	sub2, err := c.SubscribeToPersistentSubscription(ctx, "order-1", "from3", esdb.SubscribeToPersistentSubscriptionOptions{})
	require.NoError(t, err)
	defer sub2.Close()
	ch2 := psEvents(sub2)
	require.EqualValues(t, 3, nextPS(t, ch2).Event.Event.EventNumber)
	require.EqualValues(t, 4, nextPS(t, ch2).Event.Event.EventNumber)
	seed(t, s, "order-1", 1)
	require.EqualValues(t, 5, nextPS(t, ch2).Event.Event.EventNumber)
}

// GetInfo reports what a group read, holds in flight and checkpointed, for
// $all (positions) and for streams (revisions).
func TestPersistentGetInfo(t *testing.T) {
	t.Parallel()
	s, c := serverClient(t)
	ctx := ctxT(t)
	seed(t, s, "noise", 2)
	seed(t, s, "order-1", 5)
	cpEvery := settings(func(st *esdb.PersistentSubscriptionSettings) {
		st.CheckpointLowerBound, st.CheckpointUpperBound = 1, 1
	})

	t.Run("All", func(t *testing.T) {
		require.NoError(t, c.CreatePersistentSubscriptionToAll(ctx, "info", esdb.PersistentAllSubscriptionOptions{StartFrom: esdb.Start{}, Filter: orderFilter(), Settings: cpEvery}))
		info, err := c.GetPersistentSubscriptionInfoToAll(ctx, "info", esdb.GetPersistentSubscriptionOptions{})
		require.NoError(t, err)
		require.Equal(t, "$all", info.EventSource)
		require.Equal(t, "info", info.GroupName)
		require.Nil(t, info.Stats.LastKnownPosition, "nothing read yet")
		require.Nil(t, info.Stats.LastCheckpointedPosition)
		require.Equal(t, esdb.Start{}, info.Settings.StartFrom)

		sub, ch := subscribeAll(t, c, "info", 2)
		first, second := nextPS(t, ch), nextPS(t, ch)
		info, err = c.GetPersistentSubscriptionInfoToAll(ctx, "info", esdb.GetPersistentSubscriptionOptions{})
		require.NoError(t, err)
		require.Equal(t, second.Event.OriginalEvent().Position, *info.Stats.LastKnownPosition)
		require.EqualValues(t, 2, info.Stats.OutstandingMessagesCount)
		require.EqualValues(t, 2, info.Stats.TotalInFlightMessages)
		require.Len(t, info.Connections, 1)
		require.EqualValues(t, 0, info.Connections[0].AvailableSlots)

		require.NoError(t, sub.Ack(first.Event, second.Event))
		eventually(t, func() bool {
			info, err = c.GetPersistentSubscriptionInfoToAll(ctx, "info", esdb.GetPersistentSubscriptionOptions{})
			require.NoError(t, err)
			return info.Stats.LastCheckpointedPosition != nil && *info.Stats.LastCheckpointedPosition == second.Event.OriginalEvent().Position
		}, "checkpoint after the acked events")

		_, err = c.GetPersistentSubscriptionInfoToAll(ctx, "missing", esdb.GetPersistentSubscriptionOptions{})
		require.Equal(t, esdb.ErrorCodeResourceNotFound, esdbCode(t, err))
	})

	t.Run("Stream", func(t *testing.T) {
		require.NoError(t, c.CreatePersistentSubscription(ctx, "order-1", "info", esdb.PersistentStreamSubscriptionOptions{StartFrom: esdb.Start{}, Settings: cpEvery}))
		sub, err := c.SubscribeToPersistentSubscription(ctx, "order-1", "info", esdb.SubscribeToPersistentSubscriptionOptions{BufferSize: 3})
		require.NoError(t, err)
		t.Cleanup(func() { _ = sub.Close() })
		ch := psEvents(sub)
		var got []*esdb.ResolvedEvent
		for range 3 {
			got = append(got, nextPS(t, ch).Event)
		}
		require.NoError(t, sub.Ack(got[0]))
		eventually(t, func() bool {
			info, err := c.GetPersistentSubscriptionInfo(ctx, "order-1", "info", esdb.GetPersistentSubscriptionOptions{})
			require.NoError(t, err)
			return info.Stats.LastCheckpointedEventRevision != nil && *info.Stats.LastCheckpointedEventRevision == 0 &&
				*info.Stats.LastKnownEventRevision == 3 && info.Stats.OutstandingMessagesCount == 3
		}, "revision 0 checkpointed; the ack made room for 3, now read; 1, 2 and 3 outstanding")
	})
}

// Pinned sends every event of a stream to one consumer, in order, holding
// events while their consumer is full.
func TestPersistentPinned(t *testing.T) {
	t.Parallel()
	s, c := serverClient(t)
	ctx := ctxT(t)
	require.NoError(t, c.CreatePersistentSubscriptionToAll(ctx, "pinned", esdb.PersistentAllSubscriptionOptions{
		StartFrom: esdb.Start{}, Filter: orderFilter(),
		Settings: settings(func(st *esdb.PersistentSubscriptionSettings) { st.ConsumerStrategyName = esdb.ConsumerStrategyPinned }),
	}))
	subs := make([]*esdb.PersistentSubscription, 2)
	chs := make([]<-chan *esdb.PersistentSubscriptionEvent, 2)
	for i := range subs {
		subs[i], chs[i] = subscribeAll(t, c, "pinned", 3)
	}
	const streams, perStream = 8, 5
	for v := range perStream {
		for i := range streams {
			_, err := s.Append(fmt.Sprintf("order-%d", i), esdbtest.Event{Type: "Placed", Data: []byte(fmt.Sprintf(`{"v":%d}`, v))})
			require.NoError(t, err)
		}
	}
	owner := map[string]int{}
	revisions := map[string][]uint64{}
	for n := 0; n < streams*perStream; n++ {
		var i int
		var ev *esdb.EventAppeared
		select {
		case m := <-chs[0]:
			i, ev = 0, m.EventAppeared
		case m := <-chs[1]:
			i, ev = 1, m.EventAppeared
		case <-time.After(waitTimeout):
			t.Fatalf("timed out after %d events", n)
		}
		require.NotNil(t, ev)
		rec := ev.Event.OriginalEvent()
		if o, ok := owner[rec.StreamID]; ok {
			require.Equal(t, o, i, "stream %s moved to another consumer", rec.StreamID)
		}
		owner[rec.StreamID] = i
		revisions[rec.StreamID] = append(revisions[rec.StreamID], rec.EventNumber)
		require.NoError(t, subs[i].Ack(ev.Event))
	}
	used := map[int]bool{}
	for stream, revs := range revisions {
		require.Equal(t, []uint64{0, 1, 2, 3, 4}, revs, stream)
		used[owner[stream]] = true
	}
	require.Len(t, used, 2, "both consumers have streams")
}
