package nats

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/inorder/inorder/source"
)

// This file holds the Source, its state and counters, and the acker.
// run.go holds New and the run loop (sessions on the consumer, the drain,
// in-progress acks, the stall check), held.go the messages held,
// consumer.go the consumer's configuration.

// ErrAborted is returned by Run when its drain was cut short by Abort or
// Config.DrainTimeout: the batches in flight were rolled back, and their
// messages are delivered again once their AckWait passes.
// It wraps source.ErrAborted.
var ErrAborted = fmt.Errorf("nats: drain aborted: %w", source.ErrAborted)

// Point is a message's place in the stream and when the stream stored it.
type Point struct {
	// Position is the stream sequence in decimal.
	Position string `json:"position"`
	// Sequence is the stream sequence.
	Sequence uint64 `json:"sequence"`
	// Time is when the stream stored the message (zero when unknown).
	Time time.Time `json:"time,omitzero"`
}

func seqPoint(seq uint64, at time.Time) *Point {
	return &Point{Position: strconv.FormatUint(seq, 10), Sequence: seq, Time: at}
}

type lagProbe struct {
	at          time.Time
	err         error
	events      int64
	oldest      time.Time
	head        *Point
	lastApplied *Point
}

// Source feeds a projection.Processor from a JetStream stream through a
// durable pull consumer. See the package documentation.
type Source struct {
	cfg   *config
	log   *slog.Logger
	disp  *source.Dispatcher
	acker *acker
	held  heldSet
	ran   atomic.Bool

	abort     chan struct{}
	abortOnce sync.Once

	// What the stall check reads: when the last message arrived (Unix
	// nanoseconds) and how many the server had left for the consumer then.
	lastRecv      atomic.Int64
	serverPending atomic.Uint64
	flushing      atomic.Bool

	running atomic.Bool
	jsMu    sync.Mutex
	js      jetstream.JetStream // Run's, for MeasureLag
	lagMu   sync.Mutex
	probe   lagProbe
	applied map[string]*Point

	stats struct {
		received, redelivered, rejected, acked, nacked, inProgress, kicks, reconnects, sessions atomic.Int64
	}
}

// Stats are a Source's cumulative counters, for metrics.
type Stats struct {
	// Received counts messages received from the consumer, redeliveries
	// included; Redelivered those the server had delivered before.
	Received, Redelivered int64
	// Rejected counts deliveries recorded as rejected, by the mapping (no
	// aggregate id, a bad version…) or by the processor's validation.
	Rejected int64
	// Acked counts messages acknowledged after their batch committed.
	Acked int64
	// Nacked counts messages nacked, with a delay, after their batch
	// failed, or handed back unprocessed at a graceful stop.
	Nacked int64
	// InProgress counts in-progress acks sent for messages held longer
	// than a third of AckWait.
	InProgress int64
	// Kicks counts the times the source closed partial batches at once
	// because the server held messages back (MaxAckPending reached).
	Kicks int64
	// Reconnects counts sessions on the consumer after the first, and
	// reconnections of the connection.
	Reconnects int64
	// Batches counts committed batches.
	Batches int64
	// InFlight counts messages dispatched and not yet settled.
	InFlight int
	// Dispatch are the workers' figures (see package source).
	Dispatch source.Stats
}

// Stats returns the source's counters.
func (s *Source) Stats() Stats {
	ds := s.disp.Stats()
	return Stats{
		Received:    s.stats.received.Load(),
		Redelivered: s.stats.redelivered.Load(),
		Rejected:    s.stats.rejected.Load(),
		Acked:       s.stats.acked.Load(),
		Nacked:      s.stats.nacked.Load(),
		InProgress:  s.stats.inProgress.Load(),
		Kicks:       s.stats.kicks.Load(),
		Reconnects:  s.stats.reconnects.Load(),
		Batches:     ds.Committed,
		InFlight:    ds.InFlight,
		Dispatch:    ds,
	}
}

// Abort cuts a graceful stop short — the second signal: the batches in
// flight are rolled back and Run returns ErrAborted. Called before Run's
// context is cancelled, it stops Run at once. It is safe to call more than
// once, from any goroutine.
func (s *Source) Abort() { s.abortOnce.Do(func() { close(s.abort) }) }

// acker settles messages: an ack once their batch committed, a nak with a
// delay when it failed. Acks are published on the connection, which
// buffers them while it reconnects; one that is lost only makes the server
// deliver the message again after AckWait, and the gate discards the copy.
type acker struct{ s *Source }

func (a *acker) Ack(ds []*source.Delivery) {
	n := 0
	for _, d := range ds {
		h := d.Handle.(*held)
		h.done.Store(true)
		if err := h.msg.Ack(); err != nil {
			a.s.log.Debug("nats ack not sent", "name", a.s.cfg.Name, "sequence", h.seq, "error", err)
			continue
		}
		n++
	}
	a.s.stats.acked.Add(int64(n))
}

// Nack asks the server to deliver the messages again after a delay that
// grows with their deliveries, and hands them back to it (true): the
// window frees, and the redelivery may go to any process.
func (a *acker) Nack(ds []*source.Delivery, cause error) bool {
	n := 0
	for _, d := range ds {
		h := d.Handle.(*held)
		h.done.Store(true)
		if err := h.msg.NakWithDelay(a.s.cfg.nak(h.delivered)); err != nil {
			a.s.log.Debug("nats nak not sent", "name", a.s.cfg.Name, "sequence", h.seq, "error", err)
			continue
		}
		n++
	}
	a.s.stats.nacked.Add(int64(n))
	return true
}
