package source

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Counter is a source's own cumulative counter, for NewCollector.
type Counter struct {
	// Name is the metric's name after "inorder_", such as
	// "source_received_total".
	Name, Help string
	// Value reads it at scrape time.
	Value func() float64
}

// NewCollector returns a Prometheus collector of the figures every source
// shares, read at scrape time and labelled source=name:
//
//	inorder_source_acked_total                       deliveries settled after their batch committed
//	inorder_source_nacked_total                      deliveries taken back by the source after a failed batch
//	inorder_source_in_flight_events                  deliveries dispatched and not settled
//	inorder_source_window_events                     the window (Config.MaxInFlight)
//	inorder_source_batches_total{reason}             batches closed: full, window, max_wait, flush, retry
//	inorder_source_batch_fill_ratio                  histogram of batch size ÷ BatchSize
//	inorder_source_worker_wait_seconds_total{state}  workers waiting for input: idle, filling
//	inorder_source_lag_events                        events behind (absent until measured)
//	inorder_source_lag_seconds                       age of the oldest event behind (0 when none)
//
// plus the source's own counters. d or lag may be nil.
func NewCollector(name string, d *Dispatcher, lag func() Lag, counters ...Counter) prometheus.Collector {
	labels := prometheus.Labels{"source": name}
	desc := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc("inorder_"+name, help, variable, labels)
	}
	c := &collector{d: d, lag: lag, counters: counters,
		acked:      desc("source_acked_total", "Deliveries settled after their batch committed."),
		nacked:     desc("source_nacked_total", "Deliveries taken back by the source (to be redelivered) after a failed batch."),
		inFlight:   desc("source_in_flight_events", "Deliveries dispatched and not yet settled: the part of the window in use."),
		window:     desc("source_window_events", "The window: deliveries that may be in flight at once."),
		batches:    desc("source_batches_total", "Batches closed, by reason: full, window (the window was full: nothing more could come), max_wait, flush, retry.", "reason"),
		fill:       desc("source_batch_fill_ratio", "Share of the batch size each batch filled."),
		wait:       desc("source_worker_wait_seconds_total", "Time workers waited for input, summed over workers: idle (nothing to process) or filling (holding a partial batch).", "state"),
		lagEvents:  desc("source_lag_events", "Events behind the head of what the source reads: in flight, plus not yet received. Absent until measured."),
		lagSeconds: desc("source_lag_seconds", "Age of the oldest event not yet committed (0 when none). Absent until measured."),
	}
	for _, k := range counters {
		c.own = append(c.own, desc(k.Name, k.Help))
	}
	return c
}

type collector struct {
	d                                                                           *Dispatcher
	lag                                                                         func() Lag
	counters                                                                    []Counter
	own                                                                         []*prometheus.Desc
	acked, nacked, inFlight, window, batches, fill, wait, lagEvents, lagSeconds *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range append([]*prometheus.Desc{c.acked, c.nacked, c.inFlight, c.window, c.batches, c.fill, c.wait, c.lagEvents, c.lagSeconds}, c.own...) {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for i, k := range c.counters {
		counter(c.own[i], k.Value())
	}
	if c.d != nil {
		ds := c.d.Stats()
		counter(c.acked, float64(ds.Acked))
		counter(c.nacked, float64(ds.Nacked))
		gauge(c.inFlight, float64(ds.InFlight))
		gauge(c.window, float64(ds.MaxInFlight))
		for i, reason := range CloseReasons {
			counter(c.batches, float64(ds.Closed[i]), reason)
		}
		buckets := make(map[float64]uint64, len(FillBuckets))
		var n uint64
		for i, ub := range FillBuckets {
			n += uint64(ds.Fill[i])
			buckets[ub] = n
		}
		ch <- prometheus.MustNewConstHistogram(c.fill, n, ds.FillSum, buckets)
		counter(c.wait, ds.Idle.Seconds(), "idle")
		counter(c.wait, ds.Filling.Seconds(), "filling")
	}
	if c.lag == nil {
		return
	}
	if l := c.lag(); l.Known {
		gauge(c.lagEvents, float64(l.Events))
		gauge(c.lagSeconds, l.Behind.Seconds())
	}
}
