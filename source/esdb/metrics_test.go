package esdb

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/metricstest"
)

// TestMetricsOutput pins what RegisterMetrics exports, name for name, help
// for help and value for value: testdata/collector.metrics was written from
// the collector esdb had of its own, before it shared source's.
func TestMetricsOutput(t *testing.T) {
	s, err := New(&Config{URL: "esdb://127.0.0.1:1?tls=false", Name: "orders", Processor: metricstest.Processor(t, "a", "b")})
	require.NoError(t, err)
	metricstest.Count(&s.stats.received, &s.stats.skipped, &s.stats.rejected, &s.stats.acked, &s.stats.nacked, &s.stats.reconnects, &s.stats.repaired, &s.stats.gapsMissing)
	// The lag: measured, 5 behind; b applied an event of its own.
	s.probe, s.applied["b"] = lagProbe{at: metricstest.At, ahead: 5, lastApplied: &Point{Commit: 42, Time: metricstest.At}}, &Point{Commit: 7}
	metricstest.RequireGolden(t, newCollector(s), "testdata/collector.metrics")
}
