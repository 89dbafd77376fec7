package esdb_test

import (
	"context"
	"sync"
	"testing"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/esdb"
)

// held is a projection whose batches wait until it is released: events stay
// in flight for as long as a test needs.
type held struct {
	mu       sync.Mutex
	entered  int // events of the batches that reached ApplyBatch
	signal   notifier
	released chan struct{}
}

func newHeld() *held { return &held{signal: newSignal(), released: make(chan struct{})} }

func (h *held) Name() string { return "held" }

func (h *held) ApplyBatch(ctx context.Context, _ *projection.Tx, events []aggregate.Event) error {
	h.mu.Lock()
	h.entered += len(events)
	h.mu.Unlock()
	h.signal.Notify()
	select {
	case <-h.released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *held) waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.entered
}

// lagUntil measures the lag until cond holds: the server settles
// acknowledgements asynchronously, and nothing signals that it did.
func lagUntil(t *testing.T, src *esdb.Source, cond func(esdb.Lag) bool, what string) esdb.Lag {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		lag, err := src.MeasureLag(t.Context())
		require.NoError(t, err)
		if cond(lag) {
			return lag
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; last lag: %+v", what, lag)
		}
	}
}

// lastEvent returns the $all position and creation time of a stream's last
// event.
func (e *env) lastEvent(t testing.TB, stream string) (esdbc.Position, time.Time) {
	t.Helper()
	rs, err := e.client.ReadStream(context.Background(), stream, esdbc.ReadStreamOptions{Direction: esdbc.Backwards, From: esdbc.End{}}, 1)
	require.NoError(t, err)
	defer rs.Close()
	ev, err := rs.Recv()
	require.NoError(t, err)
	return ev.OriginalEvent().Position, ev.OriginalEvent().CreatedDate
}

func requireNoLag(t *testing.T, lag esdb.Lag) {
	t.Helper()
	require.True(t, lag.Known)
	require.Zero(t, lag.Events)
	require.Zero(t, lag.Behind)
	for _, p := range lag.Projections {
		require.Zero(t, p.Events, p.Projection)
		require.Zero(t, p.Behind, p.Projection)
	}
}

// Lag in catch-up mode moves as events are appended and consumed: without
// Run (from the checkpoint), while events are in flight, and once they are
// committed; events of other streams are not counted.
func TestLagCatchUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := setup(t)
	events := generate(16, 10, 3)
	for range 5 {
		e.appendRaw(t, "other-"+e.prefix, esdbc.EventData{EventType: "noise", ContentType: esdbc.ContentTypeJson, Data: []byte(`{"i":1}`)})
	}
	e.appendEvents(t, events[:15])
	cfg := esdb.Config{URL: e.url, Processor: b.Proc, Name: "lag", Mapping: esdb.Mapping{StreamPrefix: e.prefix}, LagEvery: -1, RepairAfter: -1}

	// Not running, no checkpoint: everything is behind.
	idle, err := esdb.New(&cfg)
	require.NoError(t, err)
	require.False(t, idle.Lag().Known, "not measured yet")
	lag, err := idle.MeasureLag(t.Context())
	require.NoError(t, err)
	require.True(t, lag.Known)
	require.Equal(t, "catch-up", lag.Mode)
	require.EqualValues(t, 15, lag.Events, "the other stream's events are not counted")
	require.False(t, lag.Estimated)
	headPos, _ := e.lastEvent(t, e.stream(events[14].Aggregate))
	require.Equal(t, headPos.Commit, lag.Head.Commit)
	require.Positive(t, lag.Behind)
	require.Len(t, lag.Projections, 1)
	require.Equal(t, "ledger", lag.Projections[0].Projection)
	require.EqualValues(t, 15, lag.Projections[0].Events)
	require.Nil(t, lag.Projections[0].LastApplied, "no checkpoint yet")

	r := start(t, cfg)
	waitFor(t, r.commits, applied(15, b.Proc), "the first events applied")
	lag, err = r.src.MeasureLag(t.Context())
	require.NoError(t, err)
	requireNoLag(t, lag)
	last := lag.Projections[0].LastApplied
	require.NotNil(t, last)
	require.Equal(t, headPos.Commit, last.Commit, "the newest event applied")
	require.False(t, last.Time.IsZero())
	require.NoError(t, r.stop())

	// Appended while stopped: measured from the checkpoint.
	e.appendEvents(t, events[15:])
	lag, err = idle.MeasureLag(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, len(events)-15, lag.Events)
	require.Positive(t, lag.Behind)
	require.Less(t, lag.Behind, time.Minute)
	require.Equal(t, headPos.Commit, lag.Projections[0].LastApplied.Commit, "the checkpoint")
	require.False(t, lag.Projections[0].LastApplied.Time.IsZero())

	r = start(t, cfg)
	waitFor(t, r.commits, applied(len(events), b.Proc), "every event applied")
	requireNoLag(t, lagUntil(t, r.src, func(l esdb.Lag) bool { return l.Events == 0 }, "no lag"))
	require.NoError(t, r.stop())
	b.RequireFold(t, events)
}

// Events held in flight count, with the age of the oldest; each projection
// has its own last applied event.
func TestLagInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := setup(t)
	h := newHeld()
	proc, err := projection.New(b.DB.Pool, &projection.Config{Schema: b.DB.Schema}, b.Ledger, h)
	require.NoError(t, err)
	require.NoError(t, proc.Setup(t.Context()))
	events := generate(17, 4, 3)
	r := start(t, esdb.Config{URL: e.url, Processor: proc, Name: "held", Mapping: esdb.Mapping{StreamPrefix: e.prefix}, LagEvery: -1, RepairAfter: -1})
	waitSignal(t, r.caughtUp, "caught up")
	e.appendEvents(t, events)
	waitFor(t, h.signal, func() bool { return h.waiting() == len(events) }, "every event held in a batch")

	lag, err := r.src.MeasureLag(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, len(events), lag.Events, "in flight")
	require.Positive(t, lag.Behind)
	require.Len(t, lag.Projections, 2)
	later := r.src.Lag()
	require.GreaterOrEqual(t, later.Behind, lag.Behind, "the oldest event in flight only gets older")
	require.Equal(t, r.src.Stats().InFlight, len(events))

	close(h.released)
	waitFor(t, r.commits, applied(len(events), proc), "every event applied")
	lag, err = r.src.MeasureLag(t.Context())
	require.NoError(t, err)
	requireNoLag(t, lag)
	headPos, _ := e.lastEvent(t, e.stream(events[len(events)-1].Aggregate))
	for _, p := range lag.Projections {
		require.NotNil(t, p.LastApplied, p.Projection)
		require.Equal(t, headPos.Commit, p.LastApplied.Commit, p.Projection)
	}
	require.NoError(t, r.stop())
}

// Lag in persistent mode, from the group's statistics: the events a
// stopped group has not read, and none once its consumers acknowledged
// everything; the metrics carry it.
func TestLagPersistent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := setup(t)
	events := generate(18, 10, 3)
	settings := esdbc.SubscriptionSettingsDefault()
	settings.CheckpointLowerBound, settings.CheckpointUpperBound = 1, 1
	cfg := esdb.Config{
		URL: e.url, Processor: b.Proc, Name: "lag-ps", Mapping: esdb.Mapping{StreamPrefix: e.prefix}, LagEvery: -1, RepairAfter: -1,
		Persistent: &esdb.Persistent{Group: "g-" + e.prefix, Settings: &settings},
	}
	r := start(t, cfg)
	waitSignal(t, r.subscribe, "subscribed")
	e.appendEvents(t, events[:15])
	waitFor(t, r.commits, applied(15, b.Proc), "the first events applied")
	lag := lagUntil(t, r.src, func(l esdb.Lag) bool { return l.Events == 0 }, "every acknowledgement settled")
	requireNoLag(t, lag)
	require.Equal(t, "persistent", lag.Mode)
	headPos, _ := e.lastEvent(t, e.stream(events[14].Aggregate))
	require.Equal(t, headPos.Commit, lag.Head.Commit)

	reg := prometheus.NewRegistry()
	require.NoError(t, r.src.RegisterMetrics(reg))
	got := gather(t, reg)
	require.Equal(t, 0.0, got[`inorder_source_lag_events{source="lag-ps"}`])
	require.Equal(t, 0.0, got[`inorder_projection_lag_seconds{projection="ledger",source="lag-ps"}`])
	require.Equal(t, float64(headPos.Commit), got[`inorder_projection_last_applied_commit_position{projection="ledger",source="lag-ps"}`])
	require.Positive(t, got[`inorder_projection_last_applied_timestamp_seconds{projection="ledger",source="lag-ps"}`])
	require.EqualValues(t, 15, got[`inorder_source_acked_total{source="lag-ps"}`])
	require.Positive(t, got[`inorder_source_window_events{source="lag-ps"}`])
	require.Equal(t, got[`inorder_source_batch_fill_ratio_count{source="lag-ps"}`],
		got[`inorder_source_batches_total{reason="full",source="lag-ps"}`]+got[`inorder_source_batches_total{reason="window",source="lag-ps"}`]+
			got[`inorder_source_batches_total{reason="max_wait",source="lag-ps"}`]+got[`inorder_source_batches_total{reason="flush",source="lag-ps"}`]+
			got[`inorder_source_batches_total{reason="retry",source="lag-ps"}`])
	require.Contains(t, got, `inorder_source_worker_wait_seconds_total{source="lag-ps",state="idle"}`)
	require.NoError(t, r.stop())

	// Appended while no consumer reads: the group has not read them.
	e.appendEvents(t, events[15:])
	idle, err := esdb.New(&cfg)
	require.NoError(t, err)
	lag, err = idle.MeasureLag(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, len(events)-15, lag.Events)
	require.Positive(t, lag.Behind)
	require.Equal(t, headPos.Commit, lag.Projections[0].LastApplied.Commit, "the group's checkpoint")

	r = start(t, cfg)
	waitFor(t, r.commits, applied(len(events), b.Proc), "every event applied")
	requireNoLag(t, lagUntil(t, r.src, func(l esdb.Lag) bool { return l.Events == 0 }, "every acknowledgement settled"))
	require.NoError(t, r.stop())
	b.RequireFold(t, events)
}

// gather returns every sample of reg as "name{labels}" → value; histograms
// as name_count and name_sum.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := ""
			for i, l := range m.GetLabel() {
				if i > 0 {
					labels += ","
				}
				labels += l.GetName() + `="` + l.GetValue() + `"`
			}
			key := func(suffix string) string { return mf.GetName() + suffix + "{" + labels + "}" }
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key("")] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key("")] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key("_count")] = float64(m.GetHistogram().GetSampleCount())
				out[key("_sum")] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

// Several sources register on one registry when their names differ.
func TestRegisterMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := prometheus.NewRegistry()
	for _, name := range []string{"a", "b"} {
		src, err := esdb.New(&esdb.Config{URL: "esdb://127.0.0.1:1?tls=false", Processor: b.Proc, Name: name})
		require.NoError(t, err)
		require.NoError(t, src.RegisterMetrics(reg))
	}
	again, err := esdb.New(&esdb.Config{URL: "esdb://127.0.0.1:1?tls=false", Processor: b.Proc, Name: "a"})
	require.NoError(t, err)
	require.Error(t, again.RegisterMetrics(reg), "the same name twice")
	got := gather(t, reg)
	require.Contains(t, got, `inorder_source_received_total{source="a"}`)
	require.Contains(t, got, `inorder_source_received_total{source="b"}`)
	require.Equal(t, float64(source.DefaultWindow(source.DefaultWorkers, source.DefaultBatchSize)), got[`inorder_source_window_events{source="b"}`])
	require.NotContains(t, got, `inorder_source_lag_events{source="a"}`, "no lag before it is measured")
}
