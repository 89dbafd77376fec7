package nats

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// named is a projection that only has a name: the metrics read no more.
type named string

func (n named) Name() string { return string(n) }

func (named) ApplyBatch(context.Context, *projection.Tx, []aggregate.Event) error { return nil }

// TestMetricsOutput pins what RegisterMetrics exports, name for name, help
// for help and value for value: the text below was written from the
// collector nats had of its own, before it shared source's.
func TestMetricsOutput(t *testing.T) {
	proc, err := projection.New(nil, nil, named("a"), named("b"))
	require.NoError(t, err)
	s, err := New(&Config{URL: "nats://127.0.0.1:1", Stream: "ORDERS", Name: "orders", Processor: proc})
	require.NoError(t, err)
	for i, c := range []interface{ Store(int64) }{&s.stats.received, &s.stats.redelivered, &s.stats.rejected,
		&s.stats.acked, &s.stats.nacked, &s.stats.inProgress, &s.stats.kicks, &s.stats.reconnects} {
		c.Store(int64(10 + i))
	}
	at := time.Unix(1700000000, 500_000_000)
	s.probe = lagProbe{at: at, events: 5, lastApplied: &Point{Sequence: 42, Time: at}}
	s.applied["b"] = &Point{Sequence: 7}
	require.NoError(t, testutil.CollectAndCompare(newCollector(s), strings.NewReader(natsMetrics)))
}

const natsMetrics = `
# HELP inorder_projection_lag_events Messages of this source a projection has yet to process. Absent until measured.
# TYPE inorder_projection_lag_events gauge
inorder_projection_lag_events{projection="a",source="orders"} 5
inorder_projection_lag_events{projection="b",source="orders"} 5
# HELP inorder_projection_lag_seconds Age of the oldest message of this source a projection has yet to process (0 when none). Absent until measured.
# TYPE inorder_projection_lag_seconds gauge
inorder_projection_lag_seconds{projection="a",source="orders"} 0
inorder_projection_lag_seconds{projection="b",source="orders"} 0
# HELP inorder_projection_last_applied_sequence Stream sequence of the newest message of this source a projection applied.
# TYPE inorder_projection_last_applied_sequence gauge
inorder_projection_last_applied_sequence{projection="a",source="orders"} 42
inorder_projection_last_applied_sequence{projection="b",source="orders"} 7
# HELP inorder_projection_last_applied_timestamp_seconds Time (Unix seconds) the stream stored the newest message of this source a projection applied.
# TYPE inorder_projection_last_applied_timestamp_seconds gauge
inorder_projection_last_applied_timestamp_seconds{projection="a",source="orders"} 1.7000000005e+09
# HELP inorder_source_acked_total Messages acknowledged after their batch committed.
# TYPE inorder_source_acked_total counter
inorder_source_acked_total{source="orders"} 13
# HELP inorder_source_batch_fill_ratio Share of the batch size each batch filled.
# TYPE inorder_source_batch_fill_ratio histogram
inorder_source_batch_fill_ratio_bucket{source="orders",le="0.1"} 0
inorder_source_batch_fill_ratio_bucket{source="orders",le="0.2"} 0
inorder_source_batch_fill_ratio_bucket{source="orders",le="0.3"} 0
inorder_source_batch_fill_ratio_bucket{source="orders",le="0.4"} 0
inorder_source_batch_fill_ratio_bucket{source="orders",le="0.5"} 0
inorder_source_batch_fill_ratio_bucket{source="orders",le="0.6"} 0
inorder_source_batch_fill_ratio_bucket{source="orders",le="0.7"} 0
inorder_source_batch_fill_ratio_bucket{source="orders",le="0.8"} 0
inorder_source_batch_fill_ratio_bucket{source="orders",le="0.9"} 0
inorder_source_batch_fill_ratio_bucket{source="orders",le="1"} 0
inorder_source_batch_fill_ratio_bucket{source="orders",le="+Inf"} 0
inorder_source_batch_fill_ratio_sum{source="orders"} 0
inorder_source_batch_fill_ratio_count{source="orders"} 0
# HELP inorder_source_batches_total Batches closed, by reason: full, window (the window was full: nothing more could come), max_wait, flush, retry.
# TYPE inorder_source_batches_total counter
inorder_source_batches_total{reason="flush",source="orders"} 0
inorder_source_batches_total{reason="full",source="orders"} 0
inorder_source_batches_total{reason="max_wait",source="orders"} 0
inorder_source_batches_total{reason="retry",source="orders"} 0
inorder_source_batches_total{reason="window",source="orders"} 0
# HELP inorder_source_held_back_total Times the server held messages back (MaxAckPending reached) and the source closed partial batches at once.
# TYPE inorder_source_held_back_total counter
inorder_source_held_back_total{source="orders"} 16
# HELP inorder_source_in_flight_events Messages dispatched and not yet settled: the part of the window in use.
# TYPE inorder_source_in_flight_events gauge
inorder_source_in_flight_events{source="orders"} 0
# HELP inorder_source_in_progress_acks_total In-progress acks sent for messages held longer than a third of AckWait.
# TYPE inorder_source_in_progress_acks_total counter
inorder_source_in_progress_acks_total{source="orders"} 15
# HELP inorder_source_lag_events Messages of the consumer not acknowledged, over all its processes: pending plus ack pending. Absent until measured.
# TYPE inorder_source_lag_events gauge
inorder_source_lag_events{source="orders"} 5
# HELP inorder_source_lag_seconds Age of the oldest message not acknowledged (0 when none). Absent until measured.
# TYPE inorder_source_lag_seconds gauge
inorder_source_lag_seconds{source="orders"} 0
# HELP inorder_source_nacked_total Messages nacked with a delay after a failed batch, or handed back at a graceful stop.
# TYPE inorder_source_nacked_total counter
inorder_source_nacked_total{source="orders"} 14
# HELP inorder_source_received_total Messages received from the JetStream consumer, redeliveries included.
# TYPE inorder_source_received_total counter
inorder_source_received_total{source="orders"} 10
# HELP inorder_source_reconnects_total Reconnections to NATS, and sessions on the consumer after the first.
# TYPE inorder_source_reconnects_total counter
inorder_source_reconnects_total{source="orders"} 17
# HELP inorder_source_redelivered_total Messages received that the server had delivered before (after an AckWait, a nak, a process that died).
# TYPE inorder_source_redelivered_total counter
inorder_source_redelivered_total{source="orders"} 11
# HELP inorder_source_window_events The window: messages this process may hold dispatched at once (ReadAhead).
# TYPE inorder_source_window_events gauge
inorder_source_window_events{source="orders"} 6000
# HELP inorder_source_worker_wait_seconds_total Time workers waited for input, summed over workers: idle (nothing to process) or filling (holding a partial batch).
# TYPE inorder_source_worker_wait_seconds_total counter
inorder_source_worker_wait_seconds_total{source="orders",state="filling"} 0
inorder_source_worker_wait_seconds_total{source="orders",state="idle"} 0
`
