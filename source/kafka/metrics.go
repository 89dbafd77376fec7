package kafka

import (
	"strconv"

	"github.com/inorder/inorder/source/internal/sourceutil"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inorder/inorder/source"
)

// Feed returns the source as a source.Feed: the interface through which
// package cli's run command and the conformance suite of package
// source/sourcetest run every kind of source. Its Lag is Source.Lag's
// summary.
func (s *Source) Feed() source.Feed { return sourceutil.Feed[Lag](s) }

// Summary returns the figures of l every source reports (source.Lag).
func (l Lag) Summary() source.Lag {
	return source.Lag{Source: l.Source, Known: l.Known, MeasuredAt: l.MeasuredAt, Events: l.Events,
		Behind: l.Behind, BehindSeconds: l.Behind.Seconds(), Err: l.Err}
}

// RegisterMetrics registers the source's collectors on reg, read at scrape
// time, every series labelled source=<Config.Name>: the figures every source
// shares (see source.NewCollector: acked, in flight, window, batches, fill,
// worker wait, inorder_source_lag_events and inorder_source_lag_seconds), and
//
//	inorder_source_received_total                          records received
//	inorder_source_skipped_total                           tombstones passed
//	inorder_source_rejected_total                          records recorded as rejected
//	inorder_source_truncated_total                         records retention removed before they were consumed
//	inorder_source_partitions_assigned_total               partitions assigned to this process
//	inorder_source_partitions_revoked_total                partitions handed over after a drain
//	inorder_source_partitions_lost_total                   partitions lost with the group session
//	inorder_source_owned_partitions                        partitions this process owns
//	inorder_source_partition_lag_events{topic,partition}   per partition, the group's (the same in every member)
//	inorder_source_partition_lag_seconds{topic,partition}
//	inorder_projection_lag_events{projection}              the source's lag, per projection of the processor
//	inorder_projection_lag_seconds{projection}
func (s *Source) RegisterMetrics(reg prometheus.Registerer) error {
	n := func(v func() int64) func() float64 { return func() float64 { return float64(v()) } }
	shared := source.NewCollector(s.cfg.Name, s.disp, s.Feed().Lag,
		source.Counter{Name: "source_received_total", Help: "Records received, again after a rebalance included.", Value: n(s.stats.received.Load)},
		source.Counter{Name: "source_skipped_total", Help: "Tombstones (records without a value) passed without processing.", Value: n(s.stats.skipped.Load)},
		source.Counter{Name: "source_rejected_total", Help: "Records recorded as rejected.", Value: n(s.stats.rejected.Load)},
		source.Counter{Name: "source_truncated_total", Help: "Records that retention or DeleteRecords removed before the source consumed them.", Value: n(s.stats.truncated.Load)},
		source.Counter{Name: "source_partitions_assigned_total", Help: "Partitions assigned to this process.", Value: n(s.stats.assigned.Load)},
		source.Counter{Name: "source_partitions_revoked_total", Help: "Partitions handed over after their records in flight committed.", Value: n(s.stats.revoked.Load)},
		source.Counter{Name: "source_partitions_lost_total", Help: "Partitions lost with the group session.", Value: n(s.stats.lost.Load)},
	)
	return sourceutil.Register(reg, "kafka", shared, &collector{s: s, labels: prometheus.Labels{"source": s.cfg.Name}})
}

type collector struct {
	s      *Source
	labels prometheus.Labels
}

func (c *collector) desc(name, help string, variable ...string) *prometheus.Desc {
	return prometheus.NewDesc("inorder_"+name, help, variable, c.labels)
}

func (c *collector) descs() (owned, pEvents, pSeconds, projEvents, projSeconds *prometheus.Desc) {
	return c.desc("source_owned_partitions", "Partitions this process owns."),
		c.desc("source_partition_lag_events", "Records of the partition not committed yet, by the group (every member reports the same). Absent until measured.", "topic", "partition"),
		c.desc("source_partition_lag_seconds", "Age of the partition's oldest record not committed (0 when none). Absent until measured.", "topic", "partition"),
		c.desc("projection_lag_events", "Records of this source a projection has yet to process. Absent until measured.", "projection"),
		c.desc("projection_lag_seconds", "Age of the oldest record of this source a projection has yet to process (0 when none). Absent until measured.", "projection")
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	a, b, d, e, f := c.descs()
	for _, x := range []*prometheus.Desc{a, b, d, e, f} {
		ch <- x
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	owned, pEvents, pSeconds, projEvents, projSeconds := c.descs()
	c.s.mu.Lock()
	n := len(c.s.parts)
	c.s.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(owned, prometheus.GaugeValue, float64(n))
	l := c.s.Lag()
	if !l.Known {
		return
	}
	for _, p := range l.Partitions {
		part := strconv.FormatInt(int64(p.Partition.Partition), 10)
		ch <- prometheus.MustNewConstMetric(pEvents, prometheus.GaugeValue, float64(p.Events), p.Topic, part)
		ch <- prometheus.MustNewConstMetric(pSeconds, prometheus.GaugeValue, p.Behind.Seconds(), p.Topic, part)
	}
	for _, p := range l.Projections {
		ch <- prometheus.MustNewConstMetric(projEvents, prometheus.GaugeValue, float64(p.Events), p.Projection)
		ch <- prometheus.MustNewConstMetric(projSeconds, prometheus.GaugeValue, p.Behind.Seconds(), p.Projection)
	}
}
