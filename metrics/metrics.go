package metrics

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/inorder/inorder/projection"
)

// Defaults of Options.
const (
	// DefaultNamespace prefixes every metric name.
	DefaultNamespace = "inorder"
	// DefaultCacheTTL is how long database gauges are reused.
	DefaultCacheTTL = 2 * time.Second
	// DefaultQueryTimeout bounds the database reads of one scrape.
	DefaultQueryTimeout = time.Second
)

// Options configures New. A nil *Options is valid: every field has a default.
type Options struct {
	// Namespace prefixes metric names. Default DefaultNamespace
	// ("inorder").
	Namespace string
	// CacheTTL is how long the gauges read from the database are reused
	// between scrapes. Default DefaultCacheTTL (2 s); negative disables the
	// cache.
	CacheTTL time.Duration
	// QueryTimeout bounds a scrape's database reads. Default (when not
	// positive) DefaultQueryTimeout (1 s).
	QueryTimeout time.Duration
	// Buckets are the batch duration histogram's buckets, in seconds.
	// Default: 15 buckets from 1 ms to about 16 s, doubling.
	Buckets []float64
	// NoRuntime leaves out the Go runtime and process collectors.
	NoRuntime bool
	// Logger receives failed database reads (warn). Default: discarded.
	Logger *slog.Logger
	// Gauges, if set, is the processor the gauges are read through (it
	// must have the same projections): one on a small pool of its own keeps
	// scrapes off the workers' connections. Default: the processor given
	// to New.
	Gauges *projection.Processor
	// Build, if its Version is set, is exported as inorder_build_info.
	Build Build
	// Feeds says that the processor given to New feeds its projections
	// (a worker, not a read replica): the generations it feeds are
	// exported as inorder_generation_fed, which the alert on a live
	// generation nobody feeds reads.
	Feeds bool
}

// Build describes the running binary for inorder_build_info.
type Build struct {
	Version   string
	Revision  string
	GoVersion string
}

// Metrics is a processor's metrics on a private registry. Its methods are
// safe for concurrent use.
type Metrics struct {
	reg           *prometheus.Registry
	batchDuration *prometheus.HistogramVec
	batchEvents   *prometheus.HistogramVec
	batchRetries  *prometheus.CounterVec
	httpDuration  *prometheus.HistogramVec
}

// New returns the metrics of proc: its counts, and gauges read from the
// database through proc (Processor.Status) or Options.Gauges.
func New(proc *projection.Processor, opts *Options) *Metrics {
	if opts == nil {
		opts = &Options{}
	}
	o := *opts
	o.Namespace = cmp.Or(o.Namespace, DefaultNamespace)
	o.CacheTTL = cmp.Or(o.CacheTTL, DefaultCacheTTL)
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = DefaultQueryTimeout
	}
	if len(o.Buckets) == 0 {
		o.Buckets = prometheus.ExponentialBuckets(0.001, 2, 15)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		batchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: o.Namespace, Name: "batch_duration_seconds",
			Help:    "Duration of Process calls, retries included, by projection (each projection the batch went through) and result (ok or error).",
			Buckets: o.Buckets,
		}, []string{"projection", "result"}),
		batchEvents: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: o.Namespace, Name: "batch_events",
			Help:    "Deliveries per Process call, by projection.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}, []string{"projection"}),
		batchRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: o.Namespace, Name: "batch_retries_total",
			Help: "Transactions retried by Process (attempts beyond the first), by projection.",
		}, []string{"projection"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: o.Namespace, Name: "http_request_duration_seconds",
			Help:    "Duration of HTTP requests, by route (the matched pattern) and status code.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9),
		}, []string{"route", "code"}),
	}
	// Every series exists from the start, so rate() sees the first error.
	for _, name := range proc.Projections() {
		m.batchDuration.WithLabelValues(name, "ok")
		m.batchDuration.WithLabelValues(name, "error")
		m.batchEvents.WithLabelValues(name)
		m.batchRetries.WithLabelValues(name)
	}
	m.reg.MustRegister(m.batchDuration, m.batchEvents, m.batchRetries, m.httpDuration,
		newCountsCollector(proc, o.Namespace), newDBCollector(cmp.Or(o.Gauges, proc), o))
	if o.Feeds {
		m.reg.MustRegister(newFedCollector(proc, o))
	}
	if b := o.Build; b.Version != "" {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: o.Namespace, Name: "build_info",
			Help:        "1, labelled with the running binary's version, VCS revision and Go version.",
			ConstLabels: prometheus.Labels{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion},
		}, func() float64 { return 1 }))
	}
	if !o.NoRuntime {
		m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	return m
}

// Registry returns the private registry, to register more collectors on.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats. A
// failing collector does not fail the scrape: what could be collected is
// served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// ObserveBatch records one Process call; plug it into
// projection.Config.OnBatch. On a nil *Metrics it does nothing.
func (m *Metrics) ObserveBatch(b projection.BatchInfo) {
	if m == nil {
		return
	}
	result := "ok"
	if b.Err != nil {
		result = "error"
	}
	for _, name := range b.Projections {
		m.batchDuration.WithLabelValues(name, result).Observe(b.Duration.Seconds())
		m.batchEvents.WithLabelValues(name).Observe(float64(b.Events))
		if b.Attempts > 1 {
			m.batchRetries.WithLabelValues(name).Add(float64(b.Attempts - 1))
		}
	}
}

// ObserveHTTP records one HTTP request: its route (the ServeMux pattern
// that matched, "unmatched" for none — never the raw path, which would make
// a series per aggregate), status code and duration, as
// inorder_http_request_duration_seconds. On a nil *Metrics it does nothing.
func (m *Metrics) ObserveHTTP(route string, code int, d time.Duration) {
	if m == nil {
		return
	}
	if route == "" {
		route = "unmatched"
	}
	m.httpDuration.WithLabelValues(route, strconv.Itoa(code)).Observe(d.Seconds())
}

// countsCollector exposes Processor.Counts at scrape time.
type countsCollector struct {
	proc                                     *projection.Processor
	events, drained, batch, deadlocks, stale *prometheus.Desc
	beyond                                   *prometheus.Desc
}

func newCountsCollector(proc *projection.Processor, ns string) *countsCollector {
	return &countsCollector{
		proc: proc,
		events: prometheus.NewDesc(ns+"_events_total",
			"Deliveries processed, by projection and outcome (applied, parked, duplicate, conflict, quarantined, rejected).",
			[]string{"projection", "outcome"}, nil),
		drained: prometheus.NewDesc(ns+"_drained_total",
			"Parked events applied once their predecessors arrived; events applied = applied + drained.",
			[]string{"projection"}, nil),
		batch: prometheus.NewDesc(ns+"_batches_total", "Committed transactions, by projection.",
			[]string{"projection"}, nil),
		deadlocks: prometheus.NewDesc(ns+"_deadlocks_total",
			"Transactions aborted by a PostgreSQL deadlock and retried, by projection (each projection of the processor); the warning logged with each names the table and statement.",
			[]string{"projection"}, nil),
		stale: prometheus.NewDesc(ns+"_stale_memory_total",
			"Transactions that found the processor's memory of its version rows stale (another writer moved a row) and retried reading them, by projection (each projection of the processor).",
			[]string{"projection"}, nil),
		beyond: prometheus.NewDesc(ns+"_beyond_horizon_total",
			"Stale deliveries counted as duplicates without a conflict check: older than the inline row's applied log keeps (InlineTable.LogEntries).",
			[]string{"projection"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *countsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.drained
	ch <- c.batch
	ch <- c.deadlocks
	ch <- c.stale
	ch <- c.beyond
}

// Collect implements prometheus.Collector.
func (c *countsCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.proc.Counts()
	for _, name := range c.proc.Projections() {
		pc := counts[name]
		for _, o := range projection.Outcomes {
			ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(pc.Deliveries[o]), name, o.String())
		}
		ch <- prometheus.MustNewConstMetric(c.drained, prometheus.CounterValue, float64(pc.Drained), name)
		ch <- prometheus.MustNewConstMetric(c.batch, prometheus.CounterValue, float64(pc.Batches), name)
		ch <- prometheus.MustNewConstMetric(c.deadlocks, prometheus.CounterValue, float64(pc.Deadlocks), name)
		ch <- prometheus.MustNewConstMetric(c.stale, prometheus.CounterValue, float64(pc.StaleMemory), name)
		ch <- prometheus.MustNewConstMetric(c.beyond, prometheus.CounterValue, float64(pc.BeyondHorizon), name)
	}
}

// dbCollector exposes gauges read from the database (Processor.Status
// without totals: it never counts the versions table, so a scrape stays
// cheap however many aggregates there are), cached for a while.
type dbCollector struct {
	proc *projection.Processor
	opts Options

	parked, parkedAggs, parkedAge, quarantined, conflicts *prometheus.Desc
	rejected, cpAge, up                                   *prometheus.Desc
	genInfo, genEvents, genLag                            *prometheus.Desc

	mu   sync.Mutex // serialises refreshes; guards snap
	snap *snapshot
}

// snapshot is one database read; ages are as of at.
type snapshot struct {
	at     time.Time
	err    error
	status projection.Status
}

// global ends the help of the gauges read from the database: every process
// on the schema exports the same values.
const global = "Database-wide: every process on the schema exports the same value; aggregate with max(), not sum()."

func newDBCollector(proc *projection.Processor, o Options) *dbCollector {
	ns := o.Namespace
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(ns+"_"+name, help, labels, nil)
	}
	return &dbCollector{
		proc:        proc,
		opts:        o,
		parked:      d("parked_events", "Parked events waiting for their predecessors. "+global, "projection"),
		parkedAggs:  d("parked_aggregates", "Aggregates with parked events. "+global, "projection"),
		parkedAge:   d("parked_oldest_age_seconds", "Age of the oldest parked event; 0 when none is parked. "+global, "projection"),
		quarantined: d("quarantined_events", "Quarantined events waiting for an operator. "+global, "projection"),
		conflicts:   d("open_conflicts", "Recorded conflicts no operator acknowledged (distinct conflicting events). "+global, "projection"),
		rejected:    d("rejected_pending", "Rejected deliveries no operator resolved (replayed, dismissed, declared missing). "+global),
		cpAge:       d("checkpoint_age_seconds", "Seconds since the source's checkpoint was last written (it grows on an idle stream too). "+global, "source"),
		up:          d("status_up", "1 if this process's last read of the gate state from the database succeeded, else 0."),
		genInfo: d("generation_info", "1 for every generation of a projection that is not dropped, labelled with its code version, "+
			"state (building, catchup, live, previous, failed, retired) and the phase of a rebuild working on it. "+global,
			"projection", "generation", "code_version", "state", "phase"),
		genEvents: d("generation_rebuild_events", "Events a side-by-side rebuild read into the generation. "+global, "projection", "generation"),
		genLag: d("generation_lag_seconds", "While a generation is built (building, catchup): the age of the last event the rebuild read; "+
			"0 otherwise. "+global, "projection", "generation"),
	}
}

// Describe implements prometheus.Collector.
func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.parked, c.parkedAggs, c.parkedAge, c.quarantined, c.conflicts, c.rejected, c.cpAge, c.up,
		c.genInfo, c.genEvents, c.genLag} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.read()
	if s.err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	// Ages keep growing while a snapshot is reused.
	since := time.Since(s.at).Seconds()
	for _, g := range s.status.Projections {
		age := 0.0
		if g.Parked > 0 {
			age = g.OldestParkedAge.Seconds() + since
		}
		ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, float64(g.Parked), g.Name)
		ch <- prometheus.MustNewConstMetric(c.parkedAggs, prometheus.GaugeValue, float64(g.ParkedAggregates), g.Name)
		ch <- prometheus.MustNewConstMetric(c.parkedAge, prometheus.GaugeValue, age, g.Name)
		ch <- prometheus.MustNewConstMetric(c.quarantined, prometheus.GaugeValue, float64(g.Quarantined), g.Name)
		ch <- prometheus.MustNewConstMetric(c.conflicts, prometheus.GaugeValue, float64(g.Conflicts), g.Name)
	}
	ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.GaugeValue, float64(s.status.Rejected.Pending))
	for _, cp := range s.status.Checkpoints {
		ch <- prometheus.MustNewConstMetric(c.cpAge, prometheus.GaugeValue, cp.Age.Seconds()+since, cp.Name)
	}
	for _, g := range s.status.Generations {
		gen := strconv.Itoa(g.Generation)
		ch <- prometheus.MustNewConstMetric(c.genInfo, prometheus.GaugeValue, 1, g.Projection, gen, strconv.Itoa(g.CodeVersion), g.State, g.Phase)
		ch <- prometheus.MustNewConstMetric(c.genEvents, prometheus.GaugeValue, float64(g.Events), g.Projection, gen)
		lag := 0.0
		if g.Lag > 0 {
			lag = g.Lag.Seconds() + since
		}
		ch <- prometheus.MustNewConstMetric(c.genLag, prometheus.GaugeValue, lag, g.Projection, gen)
	}
}

// read returns the cached snapshot, or a fresh one when it is older than
// the TTL. Concurrent scrapes wait for one refresh.
func (c *dbCollector) read() *snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.snap != nil && c.opts.CacheTTL > 0 && time.Since(c.snap.at) < c.opts.CacheTTL {
		return c.snap
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.QueryTimeout)
	defer cancel()
	s := &snapshot{at: time.Now()}
	s.status, s.err = c.proc.Status(ctx, &projection.StatusOptions{NoTotals: true, Entries: -1})
	if s.err != nil {
		c.opts.Logger.WarnContext(ctx, "metrics: read gate state", "error", s.err)
	}
	c.snap = s
	return s
}

// fedCollector exposes the generations the process feeds
// (Processor.Fed): per process, 1 for each.
type fedCollector struct {
	proc *projection.Processor
	opts Options
	fed  *prometheus.Desc
}

func newFedCollector(proc *projection.Processor, o Options) *fedCollector {
	return &fedCollector{proc: proc, opts: o, fed: prometheus.NewDesc(o.Namespace+"_generation_fed",
		"1 for every generation of a projection this process feeds (a worker of its code version). Per process: "+
			"a live generation that no process feeds stops moving.", []string{"projection", "generation"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *fedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.fed }

// Collect implements prometheus.Collector.
func (c *fedCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.QueryTimeout)
	defer cancel()
	fed, err := c.proc.Fed(ctx)
	if err != nil {
		c.opts.Logger.WarnContext(ctx, "metrics: read the generations fed", "error", err)
		return
	}
	for _, g := range fed {
		ch <- prometheus.MustNewConstMetric(c.fed, prometheus.GaugeValue, 1, g.Projection, strconv.Itoa(g.Generation))
	}
}
