package collect

import "time"

// CloseReasons names the reasons a dispatcher closes a batch, the values of
// the label reason of inorder_source_batches_total, indexed like
// source.Stats.Closed (the source.Close… constants).
var CloseReasons = [...]string{"full", "window", "max_wait", "flush", "retry"}

// DispatchSeries returns the series of a dispatcher's figures, read by
// stats from a scrape's figures, that every source reports alike:
//
//	inorder_source_in_flight_events                  deliveries dispatched and not settled (help text inFlight)
//	inorder_source_window_events                     the window (help text window)
//	inorder_source_batches_total{reason}             batches closed: full, window, max_wait, flush, retry
//	inorder_source_batch_fill_ratio                  histogram of batch size ÷ BatchSize
//	inorder_source_worker_wait_seconds_total{state}  workers waiting for input: idle, filling
func DispatchSeries[F any](stats func(F) Dispatch, inFlight, window string) []Series[F] {
	return []Series[F]{
		{Name: "source_in_flight_events", Help: inFlight, Gauge: true,
			Values: func(f F, report func(float64, ...string)) { report(float64(stats(f).InFlight)) }},
		{Name: "source_window_events", Help: window, Gauge: true,
			Values: func(f F, report func(float64, ...string)) { report(float64(stats(f).Window)) }},
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

// Lag is what LagSeries reads of a source's lag (source.Lag).
type Lag struct {
	Known  bool
	Events int64
	Behind time.Duration
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
