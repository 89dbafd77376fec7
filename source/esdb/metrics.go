package esdb

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inorder/inorder/source"
)

// metricsNamespace prefixes the source's metric names, like package
// metrics' default namespace.
const metricsNamespace = "inorder"

// RegisterMetrics registers the source's collectors on reg: its counters,
// its window and batches, and its lag, every series labelled
// source=<Config.Name> (the lag per projection also projection=<name>).
// Values are read from Stats and Lag at scrape time. Several sources may
// register on one registry if their names differ. See the package
// documentation for the list.
func (s *Source) RegisterMetrics(reg prometheus.Registerer) error {
	if err := reg.Register(newCollector(s)); err != nil {
		return fmt.Errorf("esdb: register metrics: %w", err)
	}
	return nil
}

// collector reads a Source's figures at scrape time. Its descriptors carry
// the source's name as a constant label, so several sources may register on
// one registry.
type collector struct {
	s                                                           *Source
	received, skipped, acked, nacked, reconnects, repaired      *prometheus.Desc
	gapsMissing, inFlight, window, batches, fill, wait          *prometheus.Desc
	lagEvents, lagSeconds, projEvents, projSeconds, projLastPos *prometheus.Desc
	projLastAt                                                  *prometheus.Desc
}

func newCollector(s *Source) *collector {
	labels := prometheus.Labels{"source": s.cfg.Name}
	d := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(metricsNamespace+"_"+name, help, variable, labels)
	}
	return &collector{
		s:           s,
		received:    d("source_received_total", "Events received from EventStoreDB, redeliveries included."),
		skipped:     d("source_skipped_total", "Events acknowledged without processing (system events, other streams or types)."),
		acked:       d("source_acked_total", "Deliveries settled after their batch committed (acknowledged to the server in persistent mode)."),
		nacked:      d("source_nacked_total", "Deliveries nacked for a retry after a failed batch (persistent mode)."),
		reconnects:  d("source_reconnects_total", "Connection attempts to EventStoreDB after the first."),
		repaired:    d("source_repaired_total", "Events read by gap repair from their stream and processed."),
		gapsMissing: d("source_gaps_missing_total", "Gaps gap repair found missing at the source (an operator must declare them)."),
		inFlight:    d("source_in_flight_events", "Events received and not yet settled: the part of the window in use."),
		window:      d("source_window_events", "The window: events that may be in flight at once (read-ahead, or the persistent subscription's buffer size)."),
		batches:     d("source_batches_total", "Batches closed, by reason: full, window (the window was full: nothing more could come), max_wait, flush, retry.", "reason"),
		fill:        d("source_batch_fill_ratio", "Share of the batch size each batch filled."),
		wait:        d("source_worker_wait_seconds_total", "Time workers waited for input, summed over workers: idle (nothing to process) or filling (holding a partial batch).", "state"),
		lagEvents:   d("source_lag_events", "Events behind the head of what the source reads (matching its filter): received and not committed, plus not yet received. Absent until measured."),
		lagSeconds:  d("source_lag_seconds", "Age of the oldest event not yet committed (0 when none). Absent until measured."),
		projEvents:  d("projection_lag_events", "Events of this source a projection has yet to process. Absent until measured.", "projection"),
		projSeconds: d("projection_lag_seconds", "Age of the oldest event of this source a projection has yet to process (0 when none). Absent until measured.", "projection"),
		projLastPos: d("projection_last_applied_commit_position", "Commit position in $all of the newest event of this source a projection applied.", "projection"),
		projLastAt:  d("projection_last_applied_timestamp_seconds", "Creation time (Unix seconds) of the newest event of this source a projection applied.", "projection"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.received, c.skipped, c.acked, c.nacked, c.reconnects, c.repaired,
		c.gapsMissing, c.inFlight, c.window, c.batches, c.fill, c.wait, c.lagEvents, c.lagSeconds,
		c.projEvents, c.projSeconds, c.projLastPos, c.projLastAt} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(c.received, float64(st.Received))
	counter(c.skipped, float64(st.Skipped))
	counter(c.acked, float64(st.Acked))
	counter(c.nacked, float64(st.Nacked))
	counter(c.reconnects, float64(st.Reconnects))
	counter(c.repaired, float64(st.Repaired))
	counter(c.gapsMissing, float64(st.GapsMissing))
	ds := st.Dispatch
	gauge(c.inFlight, float64(ds.InFlight))
	gauge(c.window, float64(ds.MaxInFlight))
	for i, reason := range source.CloseReasons {
		counter(c.batches, float64(ds.Closed[i]), reason)
	}
	buckets := make(map[float64]uint64, len(source.FillBuckets))
	var n uint64
	for i, ub := range source.FillBuckets {
		n += uint64(ds.Fill[i])
		buckets[ub] = n
	}
	ch <- prometheus.MustNewConstHistogram(c.fill, n, ds.FillSum, buckets)
	counter(c.wait, ds.Idle.Seconds(), "idle")
	counter(c.wait, ds.Filling.Seconds(), "filling")

	lag := c.s.Lag()
	if !lag.Known {
		return
	}
	gauge(c.lagEvents, float64(lag.Events))
	gauge(c.lagSeconds, lag.Behind.Seconds())
	for _, p := range lag.Projections {
		gauge(c.projEvents, float64(p.Events), p.Projection)
		gauge(c.projSeconds, p.Behind.Seconds(), p.Projection)
		if p.LastApplied != nil {
			gauge(c.projLastPos, float64(p.LastApplied.Commit), p.Projection)
			if !p.LastApplied.Time.IsZero() {
				gauge(c.projLastAt, float64(p.LastApplied.Time.UnixNano())/1e9, p.Projection)
			}
		}
	}
}
