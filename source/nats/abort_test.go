package nats_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/pgproxy"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/nats"
)

// TestAbortDuringCommit: a Source is aborted after PostgreSQL committed a
// batch and before the processor heard the COMMIT's answer (the proxy holds
// it back). The processor saw the batch fail, so its Applied counter does
// not include it, and its messages, unacknowledged, come back after AckWait
// to the next source on the consumer, whose gate counts them as duplicates.
// The read model ends complete and exact — nothing lost, nothing doubled —
// while the sum of the Applied counters stays short of the stream: what is
// applied is read from the read model, not from the counters (the demo
// waited on the counters and stuck at 938 of 1000).
//
// The stream is published in order: the held batch then always starts
// with an applicable event. Shuffled, the first batch could hold only
// future versions, parked by the held commit and applied (and counted) by
// the next processor's drain, and the counters would not fall short.
func TestAbortDuringCommit(t *testing.T) {
	_, e, b := onServer(t)
	proxy, url, err := pgproxy.ListenFor(b.DB.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	first, err := projection.New(newPool(t, url), &projection.Config{Schema: b.DB.Schema}, b.Ledger)
	require.NoError(t, err)
	events := generate(11, 40, 5)
	e.publish(t, events)

	hold := proxy.HoldAtCommit()
	cfg := e.config(b)
	cfg.Processor = first
	cfg.AckWait = time.Second
	a := start(t, cfg)
	select {
	case <-hold.Held():
	case <-time.After(waitTimeout):
		t.Fatal("no COMMIT reached the server")
	}
	aborted := time.Now()
	a.src.Abort()
	require.ErrorIs(t, a.stop(), nats.ErrAborted)
	hold.Release() // too late: the aborted processor closed its connection
	require.Equal(t, int64(1), proxy.Stats().CommitHolds)
	committed := b.AppliedVersions(t)
	require.Greater(t, int64(committed), first.Counts()["ledger"].Applied(), "the held COMMIT committed events the aborted processor did not count")

	// The next source, on the same durable consumer, gets the aborted
	// one's unacknowledged messages after AckWait.
	cfg = e.config(b)
	cfg.AckWait = time.Second
	r := start(t, cfg)
	waitFor(t, ticks(t, 20*time.Millisecond), func() bool { return b.AppliedVersions(t) == len(events) }, "the read model complete")
	complete := time.Since(aborted)
	b.RequireFold(t, events)
	waitFor(t, ticks(t, 20*time.Millisecond), func() bool {
		ci := e.consumerInfo(t, nats.DefaultConsumer)
		return ci.NumAckPending == 0 && ci.NumPending == 0
	}, "every message acknowledged")
	require.NoError(t, r.stop())

	c1, c2 := first.Counts()["ledger"], b.Proc.Counts()["ledger"]
	unheard := int64(len(events)) - c1.Applied() - c2.Applied()
	require.Positive(t, unheard, "the batch whose answer was held committed without being counted as applied")
	require.GreaterOrEqual(t, c2.Deliveries[projection.Duplicate], unheard, "its redelivered messages are duplicates")
	require.Positive(t, r.src.Stats().Redelivered)
	t.Logf("from the abort to the read model complete: %s (AckWait %s); %d events committed unheard", complete, cfg.AckWait, unheard)
}
