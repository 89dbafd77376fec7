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
	if err := reg.Register(&collector{s: s}); err != nil {
		return fmt.Errorf("esdb: register metrics: %w", err)
	}
	return nil
}

type collector struct{ s *Source }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(metricsNamespace+"_"+name, help, append([]string{"source"}, labels...), nil)
}

var (
	descReceived    = desc("source_received_total", "Events received from EventStoreDB, redeliveries included.")
	descSkipped     = desc("source_skipped_total", "Events acknowledged without processing (system events, other streams or types).")
	descAcked       = desc("source_acked_total", "Deliveries settled after their batch committed (acknowledged to the server in persistent mode).")
	descNacked      = desc("source_nacked_total", "Deliveries nacked for a retry after a failed batch (persistent mode).")
	descReconnects  = desc("source_reconnects_total", "Connection attempts to EventStoreDB after the first.")
	descRepaired    = desc("source_repaired_total", "Events read by gap repair from their stream and processed.")
	descGapsMissing = desc("source_gaps_missing_total", "Gaps gap repair found missing at the source (an operator must declare them).")
	descInFlight    = desc("source_in_flight_events", "Events received and not yet settled: the part of the window in use.")
	descWindow      = desc("source_window_events", "The window: events that may be in flight at once (read-ahead, or the persistent subscription's buffer size).")
	descBatches     = desc("source_batches_total", "Batches closed, by reason: full, window (the window was full: nothing more could come), max_wait, flush, retry.", "reason")
	descFill        = desc("source_batch_fill_ratio", "Share of the batch size each batch filled.")
	descWait        = desc("source_worker_wait_seconds_total", "Time workers waited for input, summed over workers: idle (nothing to process) or filling (holding a partial batch).", "state")
	descLagEvents   = desc("source_lag_events", "Events behind the head of what the source reads (matching its filter): received and not committed, plus not yet received. Absent until measured.")
	descLagSeconds  = desc("source_lag_seconds", "Age of the oldest event not yet committed (0 when none). Absent until measured.")
	descProjEvents  = desc("projection_lag_events", "Events of this source a projection has yet to process. Absent until measured.", "projection")
	descProjSeconds = desc("projection_lag_seconds", "Age of the oldest event of this source a projection has yet to process (0 when none). Absent until measured.", "projection")
	descProjLastPos = desc("projection_last_applied_commit_position", "Commit position in $all of the newest event of this source a projection applied.", "projection")
	descProjLastAt  = desc("projection_last_applied_timestamp_seconds", "Creation time (Unix seconds) of the newest event of this source a projection applied.", "projection")
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReceived, descSkipped, descAcked, descNacked, descReconnects, descRepaired,
		descGapsMissing, descInFlight, descWindow, descBatches, descFill, descWait, descLagEvents, descLagSeconds,
		descProjEvents, descProjSeconds, descProjLastPos, descProjLastAt} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	name := c.s.cfg.Name
	st := c.s.Stats()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{name}, labels...)...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{name}, labels...)...)
	}
	counter(descReceived, st.Received)
	counter(descSkipped, st.Skipped)
	counter(descAcked, st.Acked)
	counter(descNacked, st.Nacked)
	counter(descReconnects, st.Reconnects)
	counter(descRepaired, st.Repaired)
	counter(descGapsMissing, st.GapsMissing)
	ds := st.Dispatch
	gauge(descInFlight, float64(ds.InFlight))
	gauge(descWindow, float64(ds.MaxInFlight))
	for i, reason := range source.CloseReasons {
		counter(descBatches, ds.Closed[i], reason)
	}
	buckets := make(map[float64]uint64, len(source.FillBuckets))
	var n uint64
	for i, ub := range source.FillBuckets {
		n += uint64(ds.Fill[i])
		buckets[ub] = n
	}
	ch <- prometheus.MustNewConstHistogram(descFill, n, ds.FillSum, buckets, name)
	ch <- prometheus.MustNewConstMetric(descWait, prometheus.CounterValue, ds.Idle.Seconds(), name, "idle")
	ch <- prometheus.MustNewConstMetric(descWait, prometheus.CounterValue, ds.Filling.Seconds(), name, "filling")

	lag := c.s.Lag()
	if !lag.Known {
		return
	}
	gauge(descLagEvents, float64(lag.Events))
	gauge(descLagSeconds, lag.Behind.Seconds())
	for _, p := range lag.Projections {
		gauge(descProjEvents, float64(p.Events), p.Projection)
		gauge(descProjSeconds, p.Behind.Seconds(), p.Projection)
		if p.LastApplied != nil {
			gauge(descProjLastPos, float64(p.LastApplied.Commit), p.Projection)
			if !p.LastApplied.Time.IsZero() {
				gauge(descProjLastAt, float64(p.LastApplied.Time.UnixNano())/1e9, p.Projection)
			}
		}
	}
}
