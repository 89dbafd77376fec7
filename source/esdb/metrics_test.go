package esdb

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/metricstest"
)

// TestMetricsOutput pins what RegisterMetrics exports, name for name, help
// for help and value for value: the text in testdata/collector.metrics was written from the
// collector esdb had of its own, before it shared source's.
func TestMetricsOutput(t *testing.T) {
	s, err := New(&Config{URL: "esdb://127.0.0.1:1?tls=false", Name: "orders", Processor: metricstest.Processor(t, "a", "b")})
	require.NoError(t, err)
	for i, c := range []interface{ Store(int64) }{&s.stats.received, &s.stats.skipped, &s.stats.rejected,
		&s.stats.acked, &s.stats.nacked, &s.stats.reconnects, &s.stats.repaired, &s.stats.gapsMissing} {
		c.Store(int64(10 + i))
	}
	at := time.Unix(1700000000, 500_000_000)
	s.probe = lagProbe{at: at, ahead: 5, lastApplied: &Point{Commit: 42, Time: at}}
	s.applied["b"] = &Point{Commit: 7}
	metricstest.RequireGolden(t, newCollector(s), "testdata/collector.metrics")
}
