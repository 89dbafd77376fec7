package nats

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inorder/inorder/source/internal/collect"
	"github.com/inorder/inorder/source/internal/sourceutil"
)

// RegisterMetrics registers the source's collectors on reg, every series
// labelled source=<Config.Name> (the lag per projection also
// projection=<name>), with the names the EventStoreDB source uses where the
// figure is the same. Values are read from Stats and Lag at scrape time.
// See the package documentation for the list.
func (s *Source) RegisterMetrics(reg prometheus.Registerer) error {
	return sourceutil.Register(reg, "nats", newCollector(s))
}

// newCollector returns the Source's collector: package source's series in
// this source's words and with its counts, and its own.
func newCollector(s *Source) prometheus.Collector {
	row := sourceutil.Counter[Stats]
	return collect.New(s.cfg.Name, s.figures, sourceutil.Series([]collect.Series[sourceutil.Figures[Stats]]{
		row("source_received_total", "Messages received from the JetStream consumer, redeliveries included.", func(st Stats) int64 { return st.Received }),
		row("source_redelivered_total", "Messages received that the server had delivered before (after an AckWait, a nak, a process that died).", func(st Stats) int64 { return st.Redelivered }),
		row("source_acked_total", "Messages acknowledged after their batch committed.", func(st Stats) int64 { return st.Acked }),
		row("source_nacked_total", "Messages nacked with a delay after a failed batch, or handed back at a graceful stop.", func(st Stats) int64 { return st.Nacked }),
		row("source_in_progress_acks_total", "In-progress acks sent for messages held longer than a third of AckWait.", func(st Stats) int64 { return st.InProgress }),
		row("source_held_back_total", "Times the server held messages back (MaxAckPending reached) and the source closed partial batches at once.", func(st Stats) int64 { return st.Kicks }),
		row("source_reconnects_total", "Reconnections to NATS, and sessions on the consumer after the first.", func(st Stats) int64 { return st.Reconnects }),
	}, sourceutil.Help{
		InFlight:          "Messages dispatched and not yet settled: the part of the window in use.",
		Window:            "The window: messages this process may hold dispatched at once (ReadAhead).",
		LagEvents:         "Messages of the consumer not acknowledged, over all its processes: pending plus ack pending. Absent until measured.",
		LagSeconds:        "Age of the oldest message not acknowledged (0 when none). Absent until measured.",
		ProjectionEvents:  "Messages of this source a projection has yet to process. Absent until measured.",
		ProjectionSeconds: "Age of the oldest message of this source a projection has yet to process (0 when none). Absent until measured.",
		Position:          "projection_last_applied_sequence",
		PositionHelp:      "Stream sequence of the newest message of this source a projection applied.",
		AppliedAt:         "Time (Unix seconds) the stream stored the newest message of this source a projection applied.",
	})...)
}

// figures reads, for a scrape, the Source's Stats and Lag once.
func (s *Source) figures() sourceutil.Figures[Stats] {
	st, lag := s.Stats(), s.Lag()
	view := func(p ProjectionLag) sourceutil.Projection {
		v := sourceutil.Projection{Name: p.Projection, Events: p.Events, Behind: p.Behind}
		if last := p.LastApplied; last != nil {
			v.Applied, v.Position, v.At = true, float64(last.Sequence), last.Time
		}
		return v
	}
	return sourceutil.Figures[Stats]{Stats: st, Dispatch: st.Dispatch, Lag: lag.Summary(), Projections: sourceutil.Projections(lag.Known, lag.Projections, view)}
}
