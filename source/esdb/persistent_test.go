package esdb_test

import (
	"fmt"
	"testing"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
)

// psSettings are group settings that make redeliveries likely: a short
// message timeout, and no group checkpoint, so a server restart delivers
// every acked event again. (Under -race on a loaded machine a batch can take
// longer than 200 ms: events then time out faster than they are processed,
// and the redeliveries snowball. A second is short enough.)
func psSettings(strategy esdbc.ConsumerStrategy) *esdbc.PersistentSubscriptionSettings {
	st := esdbc.SubscriptionSettingsDefault()
	st.ConsumerStrategyName = strategy
	st.MessageTimeout = 1000 // ms
	st.MaxRetryCount = 10000
	st.CheckpointLowerBound = 100000
	st.CheckpointUpperBound = 100000
	st.CheckpointAfter = 3600 * 1000
	return &st
}

// The core property through a persistent subscription: three competing
// consumers (three Sources, each with its own processor, as three processes
// would be) with small buffers and short message timeouts, a dropped
// subscription and a server restart in between — deliveries out of order,
// redelivered and duplicated — build the in-order fold, each event applied
// once. With RoundRobin, and with Pinned (the default on servers with the
// fix of KurrentDB#5497), whose consumers lose and regain their streams as
// the subscription drops and the server restarts.
func TestPersistent(t *testing.T) {
	t.Parallel()
	for _, strategy := range []esdbc.ConsumerStrategy{esdbc.ConsumerStrategyRoundRobin, esdbc.ConsumerStrategyPinned} {
		t.Run(string(strategy), func(t *testing.T) {
			t.Parallel()
			testPersistent(t, strategy)
		})
	}
}

func testPersistent(t *testing.T, strategy esdbc.ConsumerStrategy) {
	e := newEnv(t)
	b := setup(t)
	events := generate(3, 300, 10)
	group := "g-" + e.prefix
	anyCommit := newSignal()
	var procs []*projection.Processor
	var consumers []*running
	for i := range 3 {
		p := b.NewProcessor(t)
		procs = append(procs, p)
		consumers = append(consumers, start(t, esdb.Config{
			URL: e.url, Processor: p, Name: fmt.Sprintf("consumer-%d", i),
			Persistent: &esdb.Persistent{Group: group, Settings: psSettings(strategy), BufferSize: 40},
			Workers:    2, BatchSize: 50, MaxWait: 10 * time.Millisecond,
			ReconnectMin: 10 * time.Millisecond, ReconnectMax: 100 * time.Millisecond,
			Mapping: esdb.Mapping{StreamPrefix: e.prefix},
		}, anyCommit))
	}
	for _, c := range consumers {
		waitSignal(t, c.subscribe, "consumer subscribed")
	}
	half := len(events) / 2
	e.appendEvents(t, events[:half])
	if e.srv != nil {
		waitFor(t, anyCommit, applied(half/4, procs...), "a quarter of the first half")
		e.srv.DropSubscriptions()
		waitFor(t, anyCommit, applied(half/2, procs...), "half of the first half")
		e.srv.Stop() // a node restart: acked events come again
		require.NoError(t, e.srv.Restart())
	}
	e.appendEvents(t, events[half:])
	waitFor(t, anyCommit, applied(len(events), procs...), "every event applied")
	for _, c := range consumers {
		require.NoError(t, c.stop())
	}

	b.RequireFold(t, events)
	require.Equal(t, len(events), b.appliedRows(t))
	var total, dups, received int64
	for i, p := range procs {
		c := p.Counts()["ledger"]
		total += c.Applied()
		dups += c.Deliveries[projection.Duplicate]
		received += consumers[i].src.Stats().Received
		require.Zero(t, c.Deliveries[projection.Conflict]+c.Deliveries[projection.Quarantined]+c.Deliveries[projection.Rejected])
	}
	require.EqualValues(t, len(events), total, "each event applied once, over the three consumers")
	for _, c := range consumers {
		require.Positive(t, c.src.Stats().Acked, "every consumer took part")
	}
	if e.srv != nil {
		require.Positive(t, dups, "the restart redelivered acked events")
		require.Greater(t, received, int64(len(events)))
		var reconnects int64
		for _, c := range consumers {
			reconnects += c.src.Stats().Reconnects
		}
		require.GreaterOrEqual(t, reconnects, int64(2*len(consumers)))
	}
}

// A persistent subscription to a stream, created by the source: a category
// stream of links, resolved to the payments' events.
func TestPersistentToStream(t *testing.T) {
	t.Parallel()
	e, b, events := appended(t, 4, 10, 4)
	// A category stream of links, as $by_category would write it.
	cat := "links-" + e.prefix
	var links []esdbc.EventData
	seen := map[string]bool{}
	for _, ev := range events {
		if seen[ev.Aggregate] {
			continue
		}
		seen[ev.Aggregate] = true
		rs, err := e.client.ReadStream(t.Context(), e.stream(ev.Aggregate), esdbc.ReadStreamOptions{}, 100)
		require.NoError(t, err)
		for {
			re, err := rs.Recv()
			if err != nil {
				break
			}
			links = append(links, esdbc.EventData{EventType: "$>", ContentType: esdbc.ContentTypeBinary,
				Data: []byte(fmt.Sprintf("%d@%s", re.Event.EventNumber, re.Event.StreamID))})
		}
		rs.Close()
	}
	require.Len(t, links, len(events))
	_, err := e.client.AppendToStream(t.Context(), cat, esdbc.AppendToStreamOptions{}, links...)
	require.NoError(t, err)

	settings := esdbc.SubscriptionSettingsDefault()
	settings.ResolveLinkTos = true
	r := start(t, esdb.Config{
		URL: e.url, Processor: b.Proc, Name: "to-stream",
		Persistent: &esdb.Persistent{Group: "g", Stream: cat, Settings: &settings},
		Mapping:    esdb.Mapping{StreamPrefix: e.prefix},
	})
	waitFor(t, r.commits, applied(len(events), b.Proc), "every event applied")
	require.NoError(t, r.stop())
	b.RequireFold(t, events)
	require.EqualValues(t, len(events), r.src.Stats().Acked)
}
