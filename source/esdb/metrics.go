package esdb

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inorder/inorder/source/internal/collect"
	"github.com/inorder/inorder/source/internal/sourceutil"
)

// RegisterMetrics registers the source's collectors on reg: its counters,
// its window and batches, and its lag, every series labelled
// source=<Config.Name> (the lag per projection also projection=<name>).
// Values are read from Stats and Lag at scrape time. Several sources may
// register on one registry if their names differ. See the package
// documentation for the list.
func (s *Source) RegisterMetrics(reg prometheus.Registerer) error {
	return sourceutil.Register(reg, "esdb", newCollector(s))
}

// newCollector returns the Source's collector: package source's series in
// this source's words, and its own. Acked is the source's count, which
// includes the events it skipped.
func newCollector(s *Source) prometheus.Collector {
	c := sourceutil.Counter[Stats]
	own := []collect.Series[sourceutil.Figures[Stats]]{
		c("source_received_total", "Events received from EventStoreDB, redeliveries included.", func(st Stats) int64 { return st.Received }),
		c("source_skipped_total", "Events acknowledged without processing (system events, other streams or types).", func(st Stats) int64 { return st.Skipped }),
		c("source_acked_total", "Deliveries settled after their batch committed (acknowledged to the server in persistent mode).", func(st Stats) int64 { return st.Acked }),
		c("source_nacked_total", "Deliveries nacked for a retry after a failed batch (persistent mode).", func(st Stats) int64 { return st.Nacked }),
		c("source_reconnects_total", "Connection attempts to EventStoreDB after the first.", func(st Stats) int64 { return st.Reconnects }),
		c("source_repaired_total", "Events read by gap repair from their stream and processed.", func(st Stats) int64 { return st.Repaired }),
		c("source_gaps_missing_total", "Gaps gap repair found missing at the source (an operator must declare them).", func(st Stats) int64 { return st.GapsMissing }),
	}
	return collect.New(s.cfg.Name, s.figures, sourceutil.Series(own, sourceutil.Help{
		InFlight:          "Events received and not yet settled: the part of the window in use.",
		Window:            "The window: events that may be in flight at once (read-ahead, or the persistent subscription's buffer size).",
		LagEvents:         "Events behind the head of what the source reads (matching its filter): received and not committed, plus not yet received. Absent until measured.",
		LagSeconds:        "Age of the oldest event not yet committed (0 when none). Absent until measured.",
		ProjectionEvents:  "Events of this source a projection has yet to process. Absent until measured.",
		ProjectionSeconds: "Age of the oldest event of this source a projection has yet to process (0 when none). Absent until measured.",
		Position:          "projection_last_applied_commit_position",
		PositionHelp:      "Commit position in $all of the newest event of this source a projection applied.",
		AppliedAt:         "Creation time (Unix seconds) of the newest event of this source a projection applied.",
	})...)
}

// figures reads, for a scrape, the Source's Stats and Lag once.
func (s *Source) figures() sourceutil.Figures[Stats] {
	st, lag := s.Stats(), s.Lag()
	return sourceutil.Figures[Stats]{Stats: st, Dispatch: st.Dispatch, Lag: lag.Summary(),
		Projections: sourceutil.Projections(lag.Known, lag.Projections, func(p ProjectionLag) sourceutil.Projection {
			v := sourceutil.Projection{Name: p.Projection, Events: p.Events, Behind: p.Behind}
			if a := p.LastApplied; a != nil {
				v.Applied, v.Position, v.At = true, float64(a.Commit), a.Time
			}
			return v
		})}
}
