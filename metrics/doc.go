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
// Counters, read from Processor.Counts at scrape time (cumulative since the
// processor started; nothing is counted twice):
//
//	inorder_events_total{projection,outcome}   deliveries by outcome: applied, parked,
//	                                           duplicate, conflict, quarantined, rejected
//	inorder_drained_total{projection}          parked events applied once their predecessors came
//	                                           (events applied = applied + drained)
//	inorder_batches_total{projection}          committed transactions
//
// From Config.OnBatch (rebuild batches included):
//
//	inorder_batch_duration_seconds{result}     histogram of Process calls; result "ok" or "error"
//	inorder_batch_events                       histogram of deliveries per Process call
//	inorder_batch_retries_total                transactions retried (attempts beyond the first)
//
// Gauges, read from the database at scrape time with Options.QueryTimeout and
// cached for Options.CacheTTL (so frequent scrapes cost one query set per TTL):
//
//	inorder_parked_events{projection}               parked events
//	inorder_parked_aggregates{projection}           aggregates with parked events
//	inorder_parked_oldest_age_seconds{projection}   age of the oldest parked event (0 if none)
//	inorder_quarantined_events{projection}          quarantined events
//	inorder_conflicts{projection}                   recorded conflicts
//	inorder_rejected_pending                        rejected deliveries never replayed
//	inorder_checkpoint_age_seconds{checkpoint}      seconds since the checkpoint was written:
//	                                                the source's lag while events keep flowing
//	inorder_status_up                               1 if the last database read succeeded, else 0
//
// plus the Go runtime and process collectors unless Options.NoRuntime.
package metrics
