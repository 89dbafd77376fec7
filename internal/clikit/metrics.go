package clikit

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/metrics"
	"github.com/inorder/inorder/projection"
)

// InstrumentedProcessor returns a processor of projs on pool, configured by
// cfg with schema and logger, whose batches feed the returned metrics; the
// metrics read their gauges through a small pool of their own (on o),
// which the returned func closes. feeds says that the process feeds the
// projections (a worker: metrics.Options.Feeds).
func InstrumentedProcessor(ctx context.Context, pool *pgxpool.Pool, o *DBOptions, cfg projection.Config, projs []projection.Projection, build Build, feeds bool, logger *slog.Logger) (*projection.Processor, *metrics.Metrics, func(), error) {
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
	m := metrics.New(proc, &metrics.Options{Logger: logger, Gauges: gauges, Build: MetricsBuild(build), Feeds: feeds})
	mp.Store(m)
	return proc, m, mpool.Close, nil
}

// MetricsBuild returns b for inorder_build_info.
func MetricsBuild(b Build) metrics.Build {
	return metrics.Build{Version: b.Version, Revision: b.Revision, GoVersion: b.GoVersion}
}
