package clikit

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inorder/inorder/metrics"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
)

// InstrumentedProcessor returns a processor of projs on pool, configured by
// cfg with schema and logger, whose batches feed the returned metrics; the
// metrics read their gauges through a small pool of their own (on o),
// which the returned func closes.
func InstrumentedProcessor(ctx context.Context, pool *pgxpool.Pool, o *DBOptions, cfg projection.Config, projs []projection.Projection, build Build, logger *slog.Logger) (*projection.Processor, *metrics.Metrics, func(), error) {
	var mp atomic.Pointer[metrics.Metrics]
	cfg.Schema, cfg.Logger = o.Schema, logger
	user := cfg.OnBatch
	cfg.OnBatch = func(b projection.BatchInfo) {
		mp.Load().ObserveBatch(b)
		if user != nil {
			user(b)
		}
	}
	proc, err := projection.New(pool, &cfg, projs...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("processor: %w", err)
	}
	mpool, err := Connect(ctx, o, 2, logger)
	if err != nil {
		return nil, nil, nil, err
	}
	gauges, err := projection.New(mpool, &cfg, projs...)
	if err != nil {
		mpool.Close()
		return nil, nil, nil, fmt.Errorf("processor: %w", err)
	}
	m := metrics.New(proc, &metrics.Options{Logger: logger, Gauges: gauges, Build: MetricsBuild(build)})
	mp.Store(m)
	return proc, m, mpool.Close, nil
}

// MetricsBuild returns b for inorder_build_info.
func MetricsBuild(b Build) metrics.Build {
	return metrics.Build{Version: b.Version, Revision: b.Revision, GoVersion: b.GoVersion}
}

// RegisterSourceMetrics adds the counters of the EventStoreDB source(s)
// whose stats returns to m, as inorder_source_*{source="<name>"}.
func RegisterSourceMetrics(m *metrics.Metrics, name string, stats func() esdb.Stats) {
	labels := prometheus.Labels{"source": name}
	counter := func(metric, help string, get func(esdb.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: metrics.DefaultNamespace, Subsystem: "source", Name: metric, Help: help, ConstLabels: labels,
		}, func() float64 { return float64(get(stats())) })
	}
	gauge := func(metric, help string, get func(esdb.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: metrics.DefaultNamespace, Subsystem: "source", Name: metric, Help: help, ConstLabels: labels,
		}, func() float64 { return get(stats()) })
	}
	m.Registry().MustRegister(
		counter("received_total", "Events received from EventStoreDB, redeliveries included.", func(s esdb.Stats) int64 { return s.Received }),
		counter("skipped_total", "Events acknowledged without processing (system events, other streams or types).", func(s esdb.Stats) int64 { return s.Skipped }),
		counter("acked_total", "Deliveries acknowledged after their batch committed.", func(s esdb.Stats) int64 { return s.Acked }),
		counter("nacked_total", "Deliveries nacked for a retry after a failed batch (persistent mode).", func(s esdb.Stats) int64 { return s.Nacked }),
		counter("reconnects_total", "Connection attempts to EventStoreDB after the first.", func(s esdb.Stats) int64 { return s.Reconnects }),
		counter("repaired_total", "Events read by gap repair from their stream and processed.", func(s esdb.Stats) int64 { return s.Repaired }),
		counter("gaps_missing_total", "Gaps gap repair found missing at the source (an operator must declare them).", func(s esdb.Stats) int64 { return s.GapsMissing }),
		gauge("in_flight", "Positions received and not yet covered by the checkpoint (catch-up mode).", func(s esdb.Stats) float64 { return float64(s.InFlight) }),
	)
}

// SumStats adds the counters of several sources.
func SumStats(srcs []*esdb.Source) func() esdb.Stats {
	return func() esdb.Stats {
		var t esdb.Stats
		for _, s := range srcs {
			st := s.Stats()
			t.Received += st.Received
			t.Skipped += st.Skipped
			t.Rejected += st.Rejected
			t.Acked += st.Acked
			t.Nacked += st.Nacked
			t.Reconnects += st.Reconnects
			t.Batches += st.Batches
			t.Repaired += st.Repaired
			t.GapsMissing += st.GapsMissing
			t.InFlight += st.InFlight
		}
		return t
	}
}
