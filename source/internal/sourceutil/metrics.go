package sourceutil

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/internal/collect"
)

// Figures are what one scrape reads of a source that reports its lag per
// projection (esdb, nats): its own counters S, its dispatcher's figures,
// its lag and, once the lag is known, each projection's.
type Figures[S any] struct {
	Stats       S
	Dispatch    source.Stats
	Lag         source.Lag
	Projections []Projection
}

// Projection is what a scrape reads of one projection's lag.
type Projection struct {
	Name   string
	Events int64
	Behind time.Duration
	// Applied is set when the projection applied an event of the source:
	// Position is then that event's, and At its time (zero when unknown).
	Applied  bool
	Position float64
	At       time.Time
}

// Help are the help texts of the series every such source reports, in its
// own words.
type Help struct {
	InFlight, Window                    string // collect.DispatchSeries
	LagEvents, LagSeconds               string // collect.LagSeries
	ProjectionEvents, ProjectionSeconds string // inorder_projection_lag_events, …_seconds
	// Position names the series of the newest event each projection
	// applied (after "inorder_"), PositionHelp is its help text, and
	// AppliedAt that of inorder_projection_last_applied_timestamp_seconds.
	Position, PositionHelp, AppliedAt string
}

// Counter is the row of a source's own counter, read from Figures.Stats.
func Counter[S any](name, help string, v func(S) int64) collect.Series[Figures[S]] {
	return collect.Series[Figures[S]]{Name: name, Help: help, Values: func(f Figures[S], report func(float64, ...string)) { report(float64(v(f.Stats))) }}
}

// Series returns the table of such a source's collector (for collect.New):
// its own rows, then the dispatcher's and the lag's (package collect's), then per
// projection its lag in events and seconds and the position and time of
// the newest event it applied (the time left out where it is zero).
func Series[S any](own []collect.Series[Figures[S]], h Help) []collect.Series[Figures[S]] {
	type F = Figures[S]
	projection := []string{"projection"}
	each := func(v func(Projection) (float64, bool)) func(F, func(float64, ...string)) {
		return func(f F, report func(float64, ...string)) {
			for _, p := range f.Projections {
				if x, ok := v(p); ok {
					report(x, p.Name)
				}
			}
		}
	}
	series := append(own, collect.DispatchSeries(func(f F) collect.Dispatch { return dispatch(&f.Dispatch) }, h.InFlight, h.Window)...)
	series = append(series, collect.LagSeries(func(f F) collect.Lag {
		return collect.Lag{Known: f.Lag.Known, Events: f.Lag.Events, Behind: f.Lag.Behind}
	}, h.LagEvents, h.LagSeconds)...)
	return append(series,
		collect.Series[F]{Name: "projection_lag_events", Help: h.ProjectionEvents, Labels: projection, Gauge: true,
			Values: each(func(p Projection) (float64, bool) { return float64(p.Events), true })},
		collect.Series[F]{Name: "projection_lag_seconds", Help: h.ProjectionSeconds, Labels: projection, Gauge: true,
			Values: each(func(p Projection) (float64, bool) { return p.Behind.Seconds(), true })},
		collect.Series[F]{Name: h.Position, Help: h.PositionHelp, Labels: projection, Gauge: true,
			Values: each(func(p Projection) (float64, bool) { return p.Position, p.Applied })},
		collect.Series[F]{Name: "projection_last_applied_timestamp_seconds", Help: h.AppliedAt, Labels: projection, Gauge: true,
			Values: each(func(p Projection) (float64, bool) { return float64(p.At.UnixNano()) / 1e9, p.Applied && !p.At.IsZero() })},
	)
}

// dispatch is what the shared rows read of a dispatcher's figures (as
// package source reads them for its NewCollector).
func dispatch(s *source.Stats) collect.Dispatch {
	return collect.Dispatch{InFlight: s.InFlight, Window: s.MaxInFlight, Closed: s.Closed[:],
		Fill: s.Fill[:], FillSum: s.FillSum, Idle: s.Idle, Filling: s.Filling}
}

// Projections returns what a scrape reads of each projection's lag, by
// view, or nothing while the lag is not known.
func Projections[P any](known bool, lags []P, view func(P) Projection) []Projection {
	if !known {
		return nil
	}
	out := make([]Projection, len(lags))
	for i, p := range lags {
		out[i] = view(p)
	}
	return out
}

// Register registers a source's collectors on reg, the error wrapped as
// "<pkg>: register metrics: …".
func Register(reg prometheus.Registerer, pkg string, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("%s: register metrics: %w", pkg, err)
		}
	}
	return nil
}
