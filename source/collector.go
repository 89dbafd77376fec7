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
// plus the source's own counters. d or lag may be nil. A source whose
// figures need their own help texts or values (acked counted by the
// source, a lag per projection) builds its table with NewSeriesCollector.
func NewCollector(name string, d *Dispatcher, lag func() Lag, counters ...Counter) prometheus.Collector {
	type figures struct {
		ds  *Stats
		lag Lag
	}
	var series []Series[figures]
	for _, k := range counters {
		series = append(series, Series[figures]{Name: k.Name, Help: k.Help, Values: func(_ figures, report func(float64, ...string)) { report(k.Value()) }})
	}
	if d != nil {
		stats := func(f figures) Stats { return *f.ds }
		series = append(series,
			Series[figures]{Name: "source_acked_total", Help: "Deliveries settled after their batch committed.",
				Values: func(f figures, report func(float64, ...string)) { report(float64(f.ds.Acked)) }},
			Series[figures]{Name: "source_nacked_total", Help: "Deliveries taken back by the source (to be redelivered) after a failed batch.",
				Values: func(f figures, report func(float64, ...string)) { report(float64(f.ds.Nacked)) }})
		series = append(series, DispatchSeries(stats, "Deliveries dispatched and not yet settled: the part of the window in use.",
			"The window: deliveries that may be in flight at once.")...)
	}
	if lag != nil {
		series = append(series, LagSeries(func(f figures) Lag { return f.lag },
			"Events behind the head of what the source reads: in flight, plus not yet received. Absent until measured.",
			"Age of the oldest event not yet committed (0 when none). Absent until measured.")...)
	}
	return NewSeriesCollector(name, func() figures {
		var f figures
		if d != nil {
			ds := d.Stats()
			f.ds = &ds
		}
		if lag != nil {
			f.lag = lag()
		}
		return f
	}, series...)
}

// A Series is one metric of a collector made by NewSeriesCollector: its
// name after "inorder_", its help text, its variable labels (the source's
// name is a constant label) and how its values are read from the figures F
// the collector reads once per scrape.
type Series[F any] struct {
	Name, Help string
	// Labels are the names of its variable labels, if any.
	Labels []string
	// Gauge makes it a gauge; it is a counter otherwise.
	Gauge bool
	// Values reports its values in a scrape from f: report once per value,
	// with the values of Labels in their order (none, or not at all, for
	// a figure not known).
	Values func(f F, report func(v float64, labels ...string))

	// fill, set by DispatchSeries only, makes it the histogram of batch
	// fill instead.
	fill func(F) Stats
}

// NewSeriesCollector returns a Prometheus collector of series, every one
// labelled source=name: each scrape calls read once and every series
// reports its values from what read returned. It is the table that
// NewCollector and the sources with figures of their own (see package
// source/esdb, source/nats) fill: DispatchSeries and LagSeries give the rows
// every source shares, with the source's own help texts.
func NewSeriesCollector[F any](name string, read func() F, series ...Series[F]) prometheus.Collector {
	labels := prometheus.Labels{"source": name}
	c := &seriesCollector[F]{read: read, series: series}
	for _, s := range series {
		c.descs = append(c.descs, prometheus.NewDesc("inorder_"+s.Name, s.Help, s.Labels, labels))
	}
	return c
}

type seriesCollector[F any] struct {
	read   func() F
	series []Series[F]
	descs  []*prometheus.Desc
}

func (c *seriesCollector[F]) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *seriesCollector[F]) Collect(ch chan<- prometheus.Metric) {
	f := c.read()
	for i, s := range c.series {
		d := c.descs[i]
		if s.fill != nil {
			ds := s.fill(f)
			buckets := make(map[float64]uint64, len(FillBuckets))
			var n uint64
			for i, ub := range FillBuckets {
				n += uint64(ds.Fill[i])
				buckets[ub] = n
			}
			ch <- prometheus.MustNewConstHistogram(d, n, ds.FillSum, buckets)
			continue
		}
		kind := prometheus.CounterValue
		if s.Gauge {
			kind = prometheus.GaugeValue
		}
		s.Values(f, func(v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, kind, v, labels...)
		})
	}
}

// DispatchSeries returns the series of a dispatcher's figures, read by
// stats from a scrape's figures, that every source reports alike:
//
//	inorder_source_in_flight_events                  deliveries dispatched and not settled (help text inFlight)
//	inorder_source_window_events                     the window (help text window)
//	inorder_source_batches_total{reason}             batches closed: full, window, max_wait, flush, retry
//	inorder_source_batch_fill_ratio                  histogram of batch size ÷ BatchSize
//	inorder_source_worker_wait_seconds_total{state}  workers waiting for input: idle, filling
func DispatchSeries[F any](stats func(F) Stats, inFlight, window string) []Series[F] {
	return []Series[F]{
		{Name: "source_in_flight_events", Help: inFlight, Gauge: true,
			Values: func(f F, report func(float64, ...string)) { report(float64(stats(f).InFlight)) }},
		{Name: "source_window_events", Help: window, Gauge: true,
			Values: func(f F, report func(float64, ...string)) { report(float64(stats(f).MaxInFlight)) }},
		{Name: "source_batches_total", Help: "Batches closed, by reason: full, window (the window was full: nothing more could come), max_wait, flush, retry.",
			Labels: []string{"reason"}, Values: func(f F, report func(float64, ...string)) {
				ds := stats(f)
				for i, reason := range CloseReasons {
					report(float64(ds.Closed[i]), reason)
				}
			}},
		{Name: "source_batch_fill_ratio", Help: "Share of the batch size each batch filled.", fill: stats},
		{Name: "source_worker_wait_seconds_total", Help: "Time workers waited for input, summed over workers: idle (nothing to process) or filling (holding a partial batch).",
			Labels: []string{"state"}, Values: func(f F, report func(float64, ...string)) {
				ds := stats(f)
				report(ds.Idle.Seconds(), "idle")
				report(ds.Filling.Seconds(), "filling")
			}},
	}
}

// LagSeries returns inorder_source_lag_events and inorder_source_lag_seconds
// (help texts events and seconds), read by lag from a scrape's figures and
// absent until the lag is Known.
func LagSeries[F any](lag func(F) Lag, events, seconds string) []Series[F] {
	return []Series[F]{
		{Name: "source_lag_events", Help: events, Gauge: true, Values: func(f F, report func(float64, ...string)) {
			if l := lag(f); l.Known {
				report(float64(l.Events))
			}
		}},
		{Name: "source_lag_seconds", Help: seconds, Gauge: true, Values: func(f F, report func(float64, ...string)) {
			if l := lag(f); l.Known {
				report(l.Behind.Seconds())
			}
		}},
	}
}
