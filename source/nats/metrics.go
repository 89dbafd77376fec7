package nats

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inorder/inorder/source"
)

const metricsNamespace = "inorder"

// RegisterMetrics registers the source's collectors on reg, every series
// labelled source=<Config.Name> (the lag per projection also
// projection=<name>), with the names the EventStoreDB source uses where the
// figure is the same. Values are read from Stats and Lag at scrape time.
// See the package documentation for the list.
func (s *Source) RegisterMetrics(reg prometheus.Registerer) error {
	if err := reg.Register(newCollector(s)); err != nil {
		return fmt.Errorf("nats: register metrics: %w", err)
	}
	return nil
}

type collector struct {
	s                                                         *Source
	received, redelivered, acked, nacked, progress, heldBack  *prometheus.Desc
	reconnects, inFlight, window, batches, fill, wait         *prometheus.Desc
	lagEvents, lagSeconds, projEvents, projSeconds, projLastQ *prometheus.Desc
	projLastAt                                                *prometheus.Desc
}

func newCollector(s *Source) *collector {
	labels := prometheus.Labels{"source": s.cfg.Name}
	d := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(metricsNamespace+"_"+name, help, variable, labels)
	}
	return &collector{
		s:           s,
		received:    d("source_received_total", "Messages received from the JetStream consumer, redeliveries included."),
		redelivered: d("source_redelivered_total", "Messages received that the server had delivered before (after an AckWait, a nak, a process that died)."),
		acked:       d("source_acked_total", "Messages acknowledged after their batch committed."),
		nacked:      d("source_nacked_total", "Messages nacked with a delay after a failed batch, or handed back at a graceful stop."),
		progress:    d("source_in_progress_acks_total", "In-progress acks sent for messages held longer than a third of AckWait."),
		heldBack:    d("source_held_back_total", "Times the server held messages back (MaxAckPending reached) and the source closed partial batches at once."),
		reconnects:  d("source_reconnects_total", "Reconnections to NATS, and sessions on the consumer after the first."),
		inFlight:    d("source_in_flight_events", "Messages dispatched and not yet settled: the part of the window in use."),
		window:      d("source_window_events", "The window: messages this process may hold dispatched at once (ReadAhead)."),
		batches:     d("source_batches_total", "Batches closed, by reason: full, window (the window was full: nothing more could come), max_wait, flush, retry.", "reason"),
		fill:        d("source_batch_fill_ratio", "Share of the batch size each batch filled."),
		wait:        d("source_worker_wait_seconds_total", "Time workers waited for input, summed over workers: idle (nothing to process) or filling (holding a partial batch).", "state"),
		lagEvents:   d("source_lag_events", "Messages of the consumer not acknowledged, over all its processes: pending plus ack pending. Absent until measured."),
		lagSeconds:  d("source_lag_seconds", "Age of the oldest message not acknowledged (0 when none). Absent until measured."),
		projEvents:  d("projection_lag_events", "Messages of this source a projection has yet to process. Absent until measured.", "projection"),
		projSeconds: d("projection_lag_seconds", "Age of the oldest message of this source a projection has yet to process (0 when none). Absent until measured.", "projection"),
		projLastQ:   d("projection_last_applied_sequence", "Stream sequence of the newest message of this source a projection applied.", "projection"),
		projLastAt:  d("projection_last_applied_timestamp_seconds", "Time (Unix seconds) the stream stored the newest message of this source a projection applied.", "projection"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.received, c.redelivered, c.acked, c.nacked, c.progress, c.heldBack,
		c.reconnects, c.inFlight, c.window, c.batches, c.fill, c.wait, c.lagEvents, c.lagSeconds,
		c.projEvents, c.projSeconds, c.projLastQ, c.projLastAt} {
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
	counter(c.redelivered, float64(st.Redelivered))
	counter(c.acked, float64(st.Acked))
	counter(c.nacked, float64(st.Nacked))
	counter(c.progress, float64(st.InProgress))
	counter(c.heldBack, float64(st.Kicks))
	counter(c.reconnects, float64(st.Reconnects))
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
			gauge(c.projLastQ, float64(p.LastApplied.Sequence), p.Projection)
			if !p.LastApplied.Time.IsZero() {
				gauge(c.projLastAt, float64(p.LastApplied.Time.UnixNano())/1e9, p.Projection)
			}
		}
	}
}
