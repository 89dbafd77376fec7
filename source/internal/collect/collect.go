package collect

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A Series is one metric of a collector made by New: its name after
// "inorder_", its help text, its variable labels (the source's name is a
// constant label) and how its values are read from the figures F the
// collector reads once per scrape.
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
	fill func(F) Dispatch
}

// FillBuckets are the upper bounds of the buckets of
// inorder_source_batch_fill_ratio and of source.Stats.Fill: the share of the
// batch size a batch filled.
var FillBuckets = [...]float64{0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1}

// Dispatch is what DispatchSeries reads of a dispatcher's figures
// (source.Stats).
type Dispatch struct {
	// InFlight is how many deliveries are dispatched and not settled;
	// Window how many may be.
	InFlight, Window int
	// Closed counts batches by reason, indexed like CloseReasons.
	Closed []int64
	// Fill counts batches by bucket of FillBuckets; FillSum is the sum of
	// their shares.
	Fill    []int64
	FillSum float64
	// Idle and Filling are the time workers waited for input.
	Idle, Filling time.Duration
}

// New returns a Prometheus collector of series, every one labelled
// source=name: each scrape calls read once and every series reports its
// values from what read returned.
func New[F any](name string, read func() F, series ...Series[F]) prometheus.Collector {
	labels := prometheus.Labels{"source": name}
	c := &collector[F]{read: read, series: series}
	for _, s := range series {
		c.descs = append(c.descs, prometheus.NewDesc("inorder_"+s.Name, s.Help, s.Labels, labels))
	}
	return c
}

type collector[F any] struct {
	read   func() F
	series []Series[F]
	descs  []*prometheus.Desc
}

func (c *collector[F]) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector[F]) Collect(ch chan<- prometheus.Metric) {
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
