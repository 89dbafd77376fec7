package source

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inorder/inorder/source/internal/collect"
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
// source, a lag per projection) builds its table with the same rows, in
// its own words (see package source/esdb, source/nats).
func NewCollector(name string, d *Dispatcher, lag func() Lag, counters ...Counter) prometheus.Collector {
	type figures struct {
		ds  *Stats
		lag Lag
	}
	var series []collect.Series[figures]
	for _, k := range counters {
		series = append(series, collect.Series[figures]{Name: k.Name, Help: k.Help, Values: func(_ figures, report func(float64, ...string)) { report(k.Value()) }})
	}
	if d != nil {
		stats := func(f figures) collect.Dispatch { return f.ds.figures() }
		series = append(series,
			collect.Series[figures]{Name: "source_acked_total", Help: "Deliveries settled after their batch committed.",
				Values: func(f figures, report func(float64, ...string)) { report(float64(f.ds.Acked)) }},
			collect.Series[figures]{Name: "source_nacked_total", Help: "Deliveries taken back by the source (to be redelivered) after a failed batch.",
				Values: func(f figures, report func(float64, ...string)) { report(float64(f.ds.Nacked)) }})
		series = append(series, collect.DispatchSeries(stats, "Deliveries dispatched and not yet settled: the part of the window in use.",
			"The window: deliveries that may be in flight at once.")...)
	}
	if lag != nil {
		series = append(series, collect.LagSeries(func(f figures) collect.Lag { return f.lag.figures() },
			"Events behind the head of what the source reads: in flight, plus not yet received. Absent until measured.",
			"Age of the oldest event not yet committed (0 when none). Absent until measured.")...)
	}
	return collect.New(name, func() figures {
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

// figures is what the shared rows of package collect read of s.
func (s *Stats) figures() collect.Dispatch {
	return collect.Dispatch{InFlight: s.InFlight, Window: s.MaxInFlight, Closed: s.Closed[:],
		Fill: s.Fill[:], FillSum: s.FillSum, Idle: s.Idle, Filling: s.Filling}
}

// figures is what the lag rows of package collect read of l.
func (l Lag) figures() collect.Lag {
	return collect.Lag{Known: l.Known, Events: l.Events, Behind: l.Behind}
}
