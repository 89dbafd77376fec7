// Package metrics exposes a processor's metrics to Prometheus.
//
// [New] builds the metrics on a private [prometheus.Registry] (no global
// state); [Metrics.Handler] serves them in the Prometheus text format, to
// mount at /metrics. The batch latency histogram is fed by the processor's
// Config.OnBatch hook, which must be set before the processor exists, so wire
// it through a variable assigned before the first batch:
//
//	var m *metrics.Metrics
//	cfg := &projection.Config{OnBatch: func(b projection.BatchInfo) { m.ObserveBatch(b) }}
//	proc, err := projection.New(pool, cfg, ledger.New(nil))
//	...
//	m = metrics.New(proc, nil)
//	mux.Handle("GET /metrics", m.Handler())
//
// ObserveBatch on a nil *Metrics does nothing, so batches processed before m
// is assigned are simply not observed.
//
// # Metrics
//
// docs/metrics.md lists every series with its labels; the inorder binary's
// tests check that list against what a running worker serves.
//
// Counters, read from Processor.Counts at scrape time (cumulative since the
// processor started; per process: sum them over replicas):
//
//	inorder_events_total{projection,outcome}   deliveries by outcome: applied, parked,
//	                                           duplicate, conflict, quarantined, rejected
//	inorder_drained_total{projection}          parked events applied once their predecessors came
//	                                           (events applied = applied + drained)
//	inorder_batches_total{projection}          committed transactions
//	inorder_beyond_horizon_total{projection}   stale deliveries counted as duplicates unchecked: older
//	                                           than an inline row's log keeps (the conflict horizon)
//
// From Config.OnBatch (rebuild batches included), for each projection the
// batch went through (BatchInfo.Projections):
//
//	inorder_batch_duration_seconds{projection,result}   histogram of Process calls; result "ok" or "error"
//	inorder_batch_events{projection}                    histogram of deliveries per Process call
//	inorder_batch_retries_total{projection}             transactions retried (attempts beyond the first)
//
// From [Metrics.InstrumentHTTP]:
//
//	inorder_http_request_duration_seconds{route,code}   requests by matched pattern and status
//
// Gauges, read from the database at scrape time with Options.QueryTimeout and
// cached for Options.CacheTTL (so frequent scrapes cost one query set per
// TTL). They are database-wide: every process on the schema exports the same
// values, so aggregate them with max(), not sum():
//
//	inorder_parked_events{projection}               parked events
//	inorder_parked_aggregates{projection}           aggregates with parked events
//	inorder_parked_oldest_age_seconds{projection}   age of the oldest parked event (0 if none)
//	inorder_quarantined_events{projection}          quarantined events
//	inorder_open_conflicts{projection}              conflicts no operator acknowledged
//	inorder_rejected_pending                        rejected deliveries never replayed
//	inorder_checkpoint_age_seconds{source}          seconds since the source's checkpoint moved
//	                                                (grows on an idle stream too: not a lag)
//
// and, per process:
//
//	inorder_status_up                               1 if the last database read succeeded, else 0
//	inorder_build_info{version,revision,goversion}  1 (when Options.Build.Version is set)
//
// plus the Go runtime and process collectors unless Options.NoRuntime.
package metrics
