package source_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/metricstest"
	"github.com/inorder/inorder/source"
)

// TestNewCollectorOutput pins what NewCollector exports (the Kafka and
// PostgreSQL sources' shared figures): testdata/collector.metrics was
// written from it before it became a table the EventStoreDB and NATS
// sources share.
func TestNewCollectorOutput(t *testing.T) {
	d, err := source.NewDispatcher(&source.Config{Processor: metricstest.Processor(t, "ledger"), MaxInFlight: 8})
	require.NoError(t, err)
	lag := func() source.Lag { return source.Lag{Known: true, Events: 3, Behind: 1500 * time.Millisecond} }
	c := source.NewCollector("orders", d, lag, source.Counter{Name: "source_read_total", Help: "Rows read.", Value: func() float64 { return 4 }})
	metricstest.RequireGolden(t, c, "testdata/collector.metrics")
	unknown := func() source.Lag { return source.Lag{} }
	// Without a dispatcher and before the lag is measured, nothing.
	require.Zero(t, testutil.CollectAndCount(source.NewCollector("orders", nil, unknown)))
}
