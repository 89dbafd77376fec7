package nats_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	natsc "github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/pgproxy"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/nats"
)

// TestFold publishes a shuffled ledger stream, republishes it (the stream's
// duplicate window absorbs it) and then publishes copies without
// Nats-Msg-Id (which the stream stores, and the gate discards); the read
// model equals the in-order fold, every message is acknowledged, and the
// lag falls to 0 in events and seconds.
func TestFold(t *testing.T) {
	_, e, b := onServer(t)
	events := generate(1, 40, 8)
	shuffled := hostile(2, events)

	stored := e.publish(t, shuffled)
	require.Equal(t, len(events), stored, "one message per fact: the copies with the same Nats-Msg-Id are duplicates")
	require.Zero(t, e.publish(t, events), "republished within the duplicate window")
	ack, err := nats.Publish(context.Background(), e.js, e.subjectOf(events[0]), events[0])
	require.NoError(t, err)
	require.True(t, ack.Duplicate)

	// Copies that a producer without the helper sends: no Nats-Msg-Id, so
	// the stream stores them, and the event id is derived from the fact.
	copies := 0
	for i, ev := range events {
		if i%5 != 0 {
			continue
		}
		m, err := nats.NewMsg(e.subjectOf(ev), ev)
		require.NoError(t, err)
		m.Header.Del(nats.HeaderMsgID)
		_, err = e.js.PublishMsg(context.Background(), m)
		require.NoError(t, err)
		copies++
	}

	cfg := e.config(b)
	r := start(t, cfg)
	waitFor(t, r.commits, func() bool { return r.src.Stats().Acked >= int64(len(events)+copies) }, "every message acknowledged")
	b.RequireFold(t, events)
	require.Equal(t, len(events), b.AppliedVersions(t), "each event applied once")
	require.EqualValues(t, copies, b.Proc.Counts()["ledger"].Deliveries[projection.Duplicate])

	// Live: events published while the source runs arrive too.
	more := generate(3, 5, 4)
	for i := range more {
		more[i].Aggregate = "live-" + more[i].Aggregate
	}
	e.publish(t, more)
	waitFor(t, r.commits, applied(len(events)+len(more), b.Proc), "the live events")
	// The ack follows the commit, and the server counts it when it has
	// read it: the lag falls to 0 shortly after the last live message is
	// applied, not at once.
	var lag nats.Lag
	waitFor(t, ticks(t, 20*time.Millisecond), func() bool {
		var err error
		lag, err = r.src.MeasureLag(context.Background())
		require.NoError(t, err)
		return lag.Events == 0
	}, "the lag to fall to 0")
	require.True(t, lag.Known)
	require.Zero(t, lag.Events)
	require.Zero(t, lag.Behind)
	require.Len(t, lag.Projections, 1)
	require.NotNil(t, lag.Projections[0].LastApplied)
	require.NoError(t, r.stop())

	ci := e.consumerInfo(t, nats.DefaultConsumer)
	require.Zero(t, ci.NumAckPending)
	require.Zero(t, ci.NumPending)
	require.EqualValues(t, nats.DefaultShare*(3*4*50+50), ci.Config.MaxAckPending, "MaxAckPending from the window")
	require.Equal(t, nats.MinAckWait, ci.Config.AckWait)
}

// TestLagBehind: with events waiting and no source running, the lag counts
// them and their age; MeasureLag works without Run.
func TestLagBehind(t *testing.T) {
	_, e, b := onServer(t)
	events := generate(4, 10, 3)
	e.publish(t, events[:10])
	// Create the consumer, consume nothing.
	cfg := e.config(b)
	r := start(t, cfg)
	waitFor(t, r.commits, applied(10, b.Proc), "the first events")
	require.NoError(t, r.stop())
	e.publish(t, events[10:])

	src, err := nats.New(&cfg)
	require.NoError(t, err)
	// The server counts a consumer's pending messages as its stream
	// signals them, a moment after the publish was acknowledged: measure
	// until the count has caught up (under load it read 2 of 20 once).
	var lag nats.Lag
	require.Eventually(t, func() bool {
		lag, err = src.MeasureLag(context.Background())
		return err != nil || lag.Events == int64(len(events)-10)
	}, waitTimeout, 20*time.Millisecond, "the lag counts the events published after the stop")
	require.NoError(t, err)
	require.EqualValues(t, len(events)-10, lag.Events)
	require.Positive(t, lag.Behind)
	require.NotNil(t, lag.Head)
	require.EqualValues(t, len(events), lag.Head.Sequence)
	require.NotNil(t, lag.Projections[0].LastApplied)
	require.EqualValues(t, 10, lag.Projections[0].LastApplied.Sequence, "the ack floor")
}

// TestRejected: hostile envelopes are recorded as rejected and
// acknowledged; they never block the consumer, and the valid events behind
// them are applied.
func TestRejected(t *testing.T) {
	_, e, b := onServer(t)
	ctx := context.Background()
	good := generate(5, 10, 3)
	bad := []func(*natsc.Msg){
		func(m *natsc.Msg) { m.Header.Del(nats.HeaderAggregate) },
		func(m *natsc.Msg) { m.Header.Set(nats.HeaderVersion, "0") },
		func(m *natsc.Msg) { m.Header.Set(nats.HeaderVersion, "three") },
		func(m *natsc.Msg) { m.Header.Del(nats.HeaderVersion) },
		func(m *natsc.Msg) { m.Data = []byte(`{"amount": `) },
		func(m *natsc.Msg) { m.Header.Set(nats.HeaderAggregate, "nul\x00byte") },
		func(m *natsc.Msg) { m.Data = []byte(`{"pad":"` + strings.Repeat("x", 900<<10) + `"}`) }, // over the processor's 512 KiB
		func(m *natsc.Msg) { m.Header.Del(nats.HeaderType) },
	}
	for i, spoil := range bad {
		ev, err := aggregate.New("bad", int64(i+1), "payment.authorized", map[string]int{"i": i})
		require.NoError(t, err)
		m, err := nats.NewMsg(e.subject+".bad", ev)
		require.NoError(t, err)
		spoil(m)
		_, err = e.js.PublishMsg(ctx, m)
		require.NoError(t, err)
	}
	e.publish(t, good)

	proc, err := projection.New(b.DB.Pool, &projection.Config{Schema: b.DB.Schema, Limits: aggregate.Limits{MaxPayload: 512 << 10}}, b.Ledger)
	require.NoError(t, err)
	b.Proc = proc
	r := start(t, e.config(b))
	waitFor(t, r.commits, func() bool { return r.src.Stats().Acked >= int64(len(good)+len(bad)) }, "every message acknowledged")
	b.RequireFold(t, good)
	require.Equal(t, len(bad), b.count(t, `SELECT count(*) FROM rejected`))
	require.Equal(t, len(bad), b.count(t, `SELECT count(*) FROM rejected WHERE source = 'nats'`))
	// Where the ones the mapping rejected came from is kept for the
	// operator (the processor rejects the other four).
	require.Equal(t, 4, b.count(t, `SELECT count(*) FROM rejected WHERE metadata IS NOT NULL AND convert_from(metadata, 'UTF8')::jsonb #>> '{nats,stream}' = '`+e.stream+`'`))
	require.EqualValues(t, len(bad), r.src.Stats().Rejected)
	require.NoError(t, r.stop())
	ci := e.consumerInfo(t, nats.DefaultConsumer)
	require.Zero(t, ci.NumAckPending)
	require.Zero(t, ci.NumPending)
}

// TestMaxAckPendingNoStall: at MaxAckPending the server stops delivering
// without a word. With a MaxWait far longer than the test, a source that
// waited for its batches to fill would apply nothing for a minute; it
// notices that the server holds messages back and closes them at once.
func TestMaxAckPendingNoStall(t *testing.T) {
	_, e, b := onServer(t)
	events := generate(6, 100, 6)
	e.publish(t, events)
	cfg := e.config(b)
	cfg.BatchSize, cfg.MaxWait, cfg.MaxAckPending, cfg.PullBatch = 500, time.Minute, 40, 20
	began := time.Now()
	r := start(t, cfg)
	// The last messages arrive with nothing pending behind them: caught up,
	// their batches wait for MaxWait like a trickle of live events, until
	// the graceful stop commits them.
	waitFor(t, ticks(t, 10*time.Millisecond), func() bool {
		return applied(len(events)-cfg.MaxAckPending, b.Proc)() && r.src.Stats().Received == int64(len(events))
	}, "every event received, all but the last window applied")
	took := time.Since(began)
	require.Less(t, took, cfg.MaxWait, "no batch waited for MaxWait")
	st := r.src.Stats()
	require.Positive(t, st.Kicks, "the source closed batches the server held back")
	require.NoError(t, r.stop())
	b.RequireFold(t, events)
	t.Logf("%d events through MaxAckPending %d in %s, %d held-back kicks, %d batches", len(events), cfg.MaxAckPending, took.Round(time.Millisecond), st.Kicks, st.Batches)
}

// slow is a projection whose first Apply takes d: a batch that outlasts
// AckWait.
type slow struct {
	d    time.Duration
	once sync.Once
	in   chan struct{}
}

func (s *slow) Name() string { return "slow" }

func (s *slow) Apply(ctx context.Context, _ *projection.Tx, _ aggregate.Event) error {
	s.once.Do(func() {
		close(s.in)
		select {
		case <-time.After(s.d):
		case <-ctx.Done():
		}
	})
	return nil
}

// TestInProgress: a batch that takes three times AckWait keeps its
// messages — in-progress acks — and the server delivers none of them again.
func TestInProgress(t *testing.T) {
	_, e, b := onServer(t)
	sl := &slow{d: 3 * time.Second, in: make(chan struct{})}
	proc, err := projection.New(b.DB.Pool, &projection.Config{Schema: b.DB.Schema}, b.Ledger, sl)
	require.NoError(t, err)
	require.NoError(t, proc.Setup(context.Background()))
	b.Proc = proc
	events := generate(7, 20, 5)
	e.publish(t, events)
	cfg := e.config(b)
	cfg.AckWait = time.Second
	r := start(t, cfg)
	waitFor(t, r.commits, applied(len(events), b.Proc), "every event")
	b.RequireFold(t, events)
	st := r.src.Stats()
	require.Positive(t, st.InProgress, "in-progress acks were sent")
	require.Zero(t, st.Redelivered, "nothing was delivered again")
	require.EqualValues(t, len(events), st.Received)
}

// TestServerRestart: the server restarts under a running source, which
// carries on with no error: every event applied once.
func TestServerRestart(t *testing.T) {
	srv, e, b := onServer(t)
	events := generate(8, 60, 5)
	half := len(events) / 2
	e.publish(t, events[:half])
	cfg := e.config(b)
	cfg.ReconnectMin, cfg.ReconnectMax = 20*time.Millisecond, 200*time.Millisecond
	r := start(t, cfg)
	waitFor(t, r.commits, applied(half/2, b.Proc), "some events")
	require.NoError(t, srv.Restart())
	e.publish(t, events[half:])
	waitFor(t, r.commits, applied(len(events), b.Proc), "every event")
	b.RequireFold(t, events)
	require.Equal(t, len(events), b.AppliedVersions(t))
	require.NoError(t, r.stop(), "no error surfaced")
	require.Positive(t, r.src.Stats().Reconnects)
}

// TestNakOnFailure: commits whose answer is lost (the connection cut after
// the server committed) and cut transactions make batches fail; their
// messages are nacked with a delay and delivered again, and the gate
// discards what had committed: the fold holds, every event applied once.
func TestNakOnFailure(t *testing.T) {
	_, e, b := onServer(t)
	proxy, url, err := pgproxy.ListenFor(b.DB.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = proxy.Close() })
	pool := newPool(t, url)
	proc, err := projection.New(pool, &projection.Config{Schema: b.DB.Schema, MaxRetryTime: time.Millisecond}, b.Ledger)
	require.NoError(t, err)
	b.Proc = proc
	events := generate(9, 50, 6)
	e.publish(t, events)
	proxy.CutAtCommit(2)
	cfg := e.config(b)
	cfg.NakDelay, cfg.NakDelayMax = 10*time.Millisecond, 50*time.Millisecond
	r := start(t, cfg)
	// The processor does not count what the cut commits applied (it saw
	// them fail): wait for every message to be acknowledged.
	waitFor(t, r.commits, func() bool {
		return r.src.Stats().Acked >= int64(len(events)) && proxy.ArmedCommitCuts() == 0
	}, "every message acknowledged, after the cut commits")
	b.RequireFold(t, events)
	require.Equal(t, len(events), b.AppliedVersions(t), "nothing applied twice")
	st := r.src.Stats()
	require.Positive(t, st.Dispatch.Failures)
	require.Positive(t, st.Nacked)
	require.Positive(t, st.Redelivered)
}
