package metrics

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
}

// Metrics is a processor's metrics on a private registry. Its methods are
// safe for concurrent use.
type Metrics struct {
	reg           *prometheus.Registry
	batchDuration *prometheus.HistogramVec
	batchEvents   prometheus.Histogram
	batchRetries  prometheus.Counter
}

// New returns the metrics of proc. The gauges read inorder's tables in
// proc.Schema() through pool — a small pool of its own keeps scrapes off the
// workers' connections — or proc.Pool() when pool is nil.
func New(proc *projection.Processor, pool *pgxpool.Pool, opts *Options) *Metrics {
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
	if pool == nil {
		pool = proc.Pool()
	}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		batchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: o.Namespace, Name: "batch_duration_seconds",
			Help:    "Duration of Process calls, retries included, by result (ok or error).",
			Buckets: o.Buckets,
		}, []string{"result"}),
		batchEvents: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: o.Namespace, Name: "batch_events",
			Help:    "Deliveries per Process call.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
		batchRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: o.Namespace, Name: "batch_retries_total",
			Help: "Transactions retried by Process (attempts beyond the first).",
		}),
	}
	// Both results exist from the start, so rate() sees the first error.
	m.batchDuration.WithLabelValues("ok")
	m.batchDuration.WithLabelValues("error")
	m.reg.MustRegister(m.batchDuration, m.batchEvents, m.batchRetries,
		newCountsCollector(proc, o.Namespace), newDBCollector(proc, pool, o))
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
	m.batchDuration.WithLabelValues(result).Observe(b.Duration.Seconds())
	m.batchEvents.Observe(float64(b.Events))
	if b.Attempts > 1 {
		m.batchRetries.Add(float64(b.Attempts - 1))
	}
}

// countsCollector exposes Processor.Counts at scrape time.
type countsCollector struct {
	proc                   *projection.Processor
	events, drained, batch *prometheus.Desc
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
	}
}

// Describe implements prometheus.Collector.
func (c *countsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.events
	ch <- c.drained
	ch <- c.batch
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
	}
}

// dbCollector exposes gauges read from the database, cached for a while.
// Its queries touch only the small tables (parked, quarantine, conflicts,
// rejected, checkpoints), never the versions table, so a scrape stays cheap
// however many aggregates there are.
type dbCollector struct {
	proc  *projection.Processor
	pool  *pgxpool.Pool
	opts  Options
	query struct{ parked, quarantined, conflicts, rejected, checkpoints string }

	parked, parkedAggs, parkedAge, quarantined, conflicts *prometheus.Desc
	rejected, cpAge, cpPosition, up                       *prometheus.Desc

	mu   sync.Mutex // serialises refreshes; guards snap
	snap *snapshot
}

// snapshot is one database read; ages are as of at.
type snapshot struct {
	at          time.Time
	err         error
	projections map[string]*projGauges
	rejected    int64
	checkpoints []checkpointGauges
}

type projGauges struct {
	parked, parkedAggs, quarantined, conflicts int64
	parkedAge                                  float64
}

type checkpointGauges struct {
	name     string
	position int64
	age      float64
}

func newDBCollector(proc *projection.Processor, pool *pgxpool.Pool, o Options) *dbCollector {
	ns := o.Namespace
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(ns+"_"+name, help, labels, nil)
	}
	c := &dbCollector{
		proc:        proc,
		pool:        pool,
		opts:        o,
		parked:      d("parked_events", "Parked events waiting for their predecessors.", "projection"),
		parkedAggs:  d("parked_aggregates", "Aggregates with parked events.", "projection"),
		parkedAge:   d("parked_oldest_age_seconds", "Age of the oldest parked event; 0 when none is parked.", "projection"),
		quarantined: d("quarantined_events", "Quarantined events waiting for an operator.", "projection"),
		conflicts:   d("conflicts", "Recorded conflicts (distinct conflicting events).", "projection"),
		rejected:    d("rejected_pending", "Rejected deliveries never replayed."),
		cpAge:       d("checkpoint_age_seconds", "Seconds since the source's checkpoint was written: its lag while events keep flowing.", "checkpoint"),
		cpPosition:  d("checkpoint_position", "The checkpoint's commit position.", "checkpoint"),
		up:          d("status_up", "1 if the last read of the gate state from the database succeeded, else 0."),
	}
	t := func(name string) string { return pgx.Identifier{proc.Schema(), name}.Sanitize() }
	c.query.parked = `SELECT projection, count(*), count(DISTINCT aggregate),
  greatest(extract(epoch FROM clock_timestamp() - min(parked_at)), 0)::float8
FROM ` + t("parked") + ` WHERE projection = ANY($1) GROUP BY projection`
	c.query.quarantined = `SELECT projection, count(*) FROM ` + t("quarantine") + ` WHERE projection = ANY($1) GROUP BY projection`
	c.query.conflicts = `SELECT projection, count(*) FROM ` + t("conflicts") + ` WHERE projection = ANY($1) GROUP BY projection`
	c.query.rejected = `SELECT count(*) FROM ` + t("rejected") + ` WHERE replayed_at IS NULL`
	c.query.checkpoints = `SELECT name, commit_position, greatest(extract(epoch FROM clock_timestamp() - updated_at), 0)::float8
FROM ` + t("checkpoints") + ` ORDER BY name COLLATE "C"`
	return c
}

// Describe implements prometheus.Collector.
func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.parked, c.parkedAggs, c.parkedAge, c.quarantined, c.conflicts, c.rejected, c.cpAge, c.cpPosition, c.up} {
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
	for _, name := range c.proc.Projections() {
		g := s.projections[name]
		age := 0.0
		if g.parked > 0 {
			age = g.parkedAge + since
		}
		ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, float64(g.parked), name)
		ch <- prometheus.MustNewConstMetric(c.parkedAggs, prometheus.GaugeValue, float64(g.parkedAggs), name)
		ch <- prometheus.MustNewConstMetric(c.parkedAge, prometheus.GaugeValue, age, name)
		ch <- prometheus.MustNewConstMetric(c.quarantined, prometheus.GaugeValue, float64(g.quarantined), name)
		ch <- prometheus.MustNewConstMetric(c.conflicts, prometheus.GaugeValue, float64(g.conflicts), name)
	}
	ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.GaugeValue, float64(s.rejected))
	for _, cp := range s.checkpoints {
		ch <- prometheus.MustNewConstMetric(c.cpAge, prometheus.GaugeValue, cp.age+since, cp.name)
		ch <- prometheus.MustNewConstMetric(c.cpPosition, prometheus.GaugeValue, float64(cp.position), cp.name)
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
	s := &snapshot{at: time.Now(), projections: map[string]*projGauges{}}
	names := c.proc.Projections()
	for _, n := range names {
		s.projections[n] = &projGauges{}
	}
	perProjection := func(set func(g *projGauges, n int64)) func(pgx.Rows) error {
		return func(rows pgx.Rows) error {
			var name string
			var n int64
			_, err := pgx.ForEachRow(rows, []any{&name, &n}, func() error {
				if g := s.projections[name]; g != nil {
					set(g, n)
				}
				return nil
			})
			return err
		}
	}
	b := &pgx.Batch{}
	b.Queue(c.query.parked, names).Query(func(rows pgx.Rows) error {
		var name string
		var n, aggs int64
		var age float64
		_, err := pgx.ForEachRow(rows, []any{&name, &n, &aggs, &age}, func() error {
			if g := s.projections[name]; g != nil {
				g.parked, g.parkedAggs, g.parkedAge = n, aggs, age
			}
			return nil
		})
		return err
	})
	b.Queue(c.query.quarantined, names).Query(perProjection(func(g *projGauges, n int64) { g.quarantined = n }))
	b.Queue(c.query.conflicts, names).Query(perProjection(func(g *projGauges, n int64) { g.conflicts = n }))
	b.Queue(c.query.rejected).QueryRow(func(row pgx.Row) error { return row.Scan(&s.rejected) })
	b.Queue(c.query.checkpoints).Query(func(rows pgx.Rows) error {
		var cp checkpointGauges
		_, err := pgx.ForEachRow(rows, []any{&cp.name, &cp.position, &cp.age}, func() error {
			s.checkpoints = append(s.checkpoints, cp)
			return nil
		})
		return err
	})
	s.err = c.pool.SendBatch(ctx, b).Close()
	if s.err != nil {
		c.opts.Logger.WarnContext(ctx, "inorder: metrics: read gate state", "error", s.err)
	}
	c.snap = s
	return s
}
