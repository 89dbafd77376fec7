package source_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// named is a projection that only has a name.
type named string

func (n named) Name() string { return string(n) }

func (named) ApplyBatch(context.Context, *projection.Tx, []aggregate.Event) error { return nil }

// TestNewCollectorOutput pins what NewCollector exports (the Kafka and
// PostgreSQL sources' shared figures): the text below was written from it
// before it became a table the EventStoreDB and NATS sources share.
func TestNewCollectorOutput(t *testing.T) {
	proc, err := projection.New(nil, nil, named("a"))
	require.NoError(t, err)
	d, err := source.NewDispatcher(&source.Config{Processor: proc, MaxInFlight: 8})
	require.NoError(t, err)
	lag := func() source.Lag { return source.Lag{Known: true, Events: 3, Behind: 1500 * time.Millisecond} }
	c := source.NewCollector("orders", d, lag, source.Counter{Name: "source_read_total", Help: "Rows read.", Value: func() float64 { return 4 }})
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(collectorMetrics)))
	unknown := func() source.Lag { return source.Lag{} }
	// Without a dispatcher and before the lag is measured, nothing.
	require.Zero(t, testutil.CollectAndCount(source.NewCollector("orders", nil, unknown)))
}

const collectorMetrics = `
# HELP inorder_source_acked_total Deliveries settled after their batch committed.
# TYPE inorder_source_acked_total counter
inorder_source_acked_total{source="orders"} 0
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
# HELP inorder_source_in_flight_events Deliveries dispatched and not yet settled: the part of the window in use.
# TYPE inorder_source_in_flight_events gauge
inorder_source_in_flight_events{source="orders"} 0
# HELP inorder_source_lag_events Events behind the head of what the source reads: in flight, plus not yet received. Absent until measured.
# TYPE inorder_source_lag_events gauge
inorder_source_lag_events{source="orders"} 3
# HELP inorder_source_lag_seconds Age of the oldest event not yet committed (0 when none). Absent until measured.
# TYPE inorder_source_lag_seconds gauge
inorder_source_lag_seconds{source="orders"} 1.5
# HELP inorder_source_nacked_total Deliveries taken back by the source (to be redelivered) after a failed batch.
# TYPE inorder_source_nacked_total counter
inorder_source_nacked_total{source="orders"} 0
# HELP inorder_source_read_total Rows read.
# TYPE inorder_source_read_total counter
inorder_source_read_total{source="orders"} 4
# HELP inorder_source_window_events The window: deliveries that may be in flight at once.
# TYPE inorder_source_window_events gauge
inorder_source_window_events{source="orders"} 8
# HELP inorder_source_worker_wait_seconds_total Time workers waited for input, summed over workers: idle (nothing to process) or filling (holding a partial batch).
# TYPE inorder_source_worker_wait_seconds_total counter
inorder_source_worker_wait_seconds_total{source="orders",state="filling"} 0
inorder_source_worker_wait_seconds_total{source="orders",state="idle"} 0
`
