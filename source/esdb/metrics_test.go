package esdb

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
// collector esdb had of its own, before it shared source's.
func TestMetricsOutput(t *testing.T) {
	proc, err := projection.New(nil, nil, named("a"), named("b"))
	require.NoError(t, err)
	s, err := New(&Config{URL: "esdb://127.0.0.1:1?tls=false", Name: "orders", Processor: proc})
	require.NoError(t, err)
	for i, c := range []interface{ Store(int64) }{&s.stats.received, &s.stats.skipped, &s.stats.rejected,
		&s.stats.acked, &s.stats.nacked, &s.stats.reconnects, &s.stats.repaired, &s.stats.gapsMissing} {
		c.Store(int64(10 + i))
	}
	at := time.Unix(1700000000, 500_000_000)
	s.probe = lagProbe{at: at, ahead: 5, lastApplied: &Point{Commit: 42, Time: at}}
	s.applied["b"] = &Point{Commit: 7}
	require.NoError(t, testutil.CollectAndCompare(newCollector(s), strings.NewReader(esdbMetrics)))
}

const esdbMetrics = `
# HELP inorder_projection_lag_events Events of this source a projection has yet to process. Absent until measured.
# TYPE inorder_projection_lag_events gauge
inorder_projection_lag_events{projection="a",source="orders"} 5
inorder_projection_lag_events{projection="b",source="orders"} 5
# HELP inorder_projection_lag_seconds Age of the oldest event of this source a projection has yet to process (0 when none). Absent until measured.
# TYPE inorder_projection_lag_seconds gauge
inorder_projection_lag_seconds{projection="a",source="orders"} 0
inorder_projection_lag_seconds{projection="b",source="orders"} 0
# HELP inorder_projection_last_applied_commit_position Commit position in $all of the newest event of this source a projection applied.
# TYPE inorder_projection_last_applied_commit_position gauge
inorder_projection_last_applied_commit_position{projection="a",source="orders"} 42
inorder_projection_last_applied_commit_position{projection="b",source="orders"} 7
# HELP inorder_projection_last_applied_timestamp_seconds Creation time (Unix seconds) of the newest event of this source a projection applied.
# TYPE inorder_projection_last_applied_timestamp_seconds gauge
inorder_projection_last_applied_timestamp_seconds{projection="a",source="orders"} 1.7000000005e+09
# HELP inorder_source_acked_total Deliveries settled after their batch committed (acknowledged to the server in persistent mode).
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
# HELP inorder_source_gaps_missing_total Gaps gap repair found missing at the source (an operator must declare them).
# TYPE inorder_source_gaps_missing_total counter
inorder_source_gaps_missing_total{source="orders"} 17
# HELP inorder_source_in_flight_events Events received and not yet settled: the part of the window in use.
# TYPE inorder_source_in_flight_events gauge
inorder_source_in_flight_events{source="orders"} 0
# HELP inorder_source_lag_events Events behind the head of what the source reads (matching its filter): received and not committed, plus not yet received. Absent until measured.
# TYPE inorder_source_lag_events gauge
inorder_source_lag_events{source="orders"} 5
# HELP inorder_source_lag_seconds Age of the oldest event not yet committed (0 when none). Absent until measured.
# TYPE inorder_source_lag_seconds gauge
inorder_source_lag_seconds{source="orders"} 0
# HELP inorder_source_nacked_total Deliveries nacked for a retry after a failed batch (persistent mode).
# TYPE inorder_source_nacked_total counter
inorder_source_nacked_total{source="orders"} 14
# HELP inorder_source_received_total Events received from EventStoreDB, redeliveries included.
# TYPE inorder_source_received_total counter
inorder_source_received_total{source="orders"} 10
# HELP inorder_source_reconnects_total Connection attempts to EventStoreDB after the first.
# TYPE inorder_source_reconnects_total counter
inorder_source_reconnects_total{source="orders"} 15
# HELP inorder_source_repaired_total Events read by gap repair from their stream and processed.
# TYPE inorder_source_repaired_total counter
inorder_source_repaired_total{source="orders"} 16
# HELP inorder_source_skipped_total Events acknowledged without processing (system events, other streams or types).
# TYPE inorder_source_skipped_total counter
inorder_source_skipped_total{source="orders"} 11
# HELP inorder_source_window_events The window: events that may be in flight at once (read-ahead, or the persistent subscription's buffer size).
# TYPE inorder_source_window_events gauge
inorder_source_window_events{source="orders"} 6000
# HELP inorder_source_worker_wait_seconds_total Time workers waited for input, summed over workers: idle (nothing to process) or filling (holding a partial batch).
# TYPE inorder_source_worker_wait_seconds_total counter
inorder_source_worker_wait_seconds_total{source="orders",state="filling"} 0
inorder_source_worker_wait_seconds_total{source="orders",state="idle"} 0
`
