package nats

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/metricstest"
)

// TestMetricsOutput pins what RegisterMetrics exports, name for name, help
// for help and value for value: testdata/collector.metrics was written from
// the collector nats had of its own, before it shared source's.
func TestMetricsOutput(t *testing.T) {
	s, err := New(&Config{URL: "nats://127.0.0.1:1", Stream: "ORDERS", Name: "orders", Processor: metricstest.Processor(t, "a", "b")})
	require.NoError(t, err)
	metricstest.Count(&s.stats.received, &s.stats.redelivered, &s.stats.rejected, &s.stats.acked, &s.stats.nacked, &s.stats.inProgress, &s.stats.kicks, &s.stats.reconnects)
	// The lag: measured, 5 behind; b applied an event of its own.
	s.probe, s.applied["b"] = lagProbe{at: metricstest.At, events: 5, lastApplied: &Point{Sequence: 42, Time: metricstest.At}}, &Point{Sequence: 7}
	metricstest.RequireGolden(t, newCollector(s), "testdata/collector.metrics")
}
