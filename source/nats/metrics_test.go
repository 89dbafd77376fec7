package nats

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/metricstest"
)

// TestMetricsOutput pins what RegisterMetrics exports, name for name, help
// for help and value for value: the text in testdata/collector.metrics was written from the
// collector nats had of its own, before it shared source's.
func TestMetricsOutput(t *testing.T) {
	s, err := New(&Config{URL: "nats://127.0.0.1:1", Stream: "ORDERS", Name: "orders", Processor: metricstest.Processor(t, "a", "b")})
	require.NoError(t, err)
	for i, c := range []interface{ Store(int64) }{&s.stats.received, &s.stats.redelivered, &s.stats.rejected,
		&s.stats.acked, &s.stats.nacked, &s.stats.inProgress, &s.stats.kicks, &s.stats.reconnects} {
		c.Store(int64(10 + i))
	}
	at := time.Unix(1700000000, 500_000_000)
	s.probe = lagProbe{at: at, events: 5, lastApplied: &Point{Sequence: 42, Time: at}}
	s.applied["b"] = &Point{Sequence: 7}
	metricstest.RequireGolden(t, newCollector(s), "testdata/collector.metrics")
}
