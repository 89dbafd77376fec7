package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	natsc "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/internal/sourceutil"
)

// This file holds the Source, its counters and its run loop: sessions on
// the consumer, the drain, and the acker. held.go keeps the messages held
// and their in-progress acks, consumer.go the consumer's configuration.

// ErrAborted is returned by Run when its drain was cut short by Abort or
// Config.DrainTimeout: the batches in flight were rolled back, and their
// messages are delivered again once their AckWait passes.
// It wraps source.ErrAborted.
var ErrAborted = fmt.Errorf("nats: drain aborted: %w", source.ErrAborted)

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

// New validates cfg, applies its defaults and returns a Source. It does not
// connect: Run does.
func New(cfg *Config) (*Source, error) {
	c, err := newConfig(cfg, false)
	if err != nil {
		return nil, err
	}
	s := &Source{cfg: c, log: c.Logger, abort: make(chan struct{}), applied: map[string]*Point{}}
	s.acker = &acker{s: s}
	dc := c.dispCfg
	dc.AfterCommit = s.afterCommit
	s.disp, err = source.NewDispatcher(&dc)
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	return s, nil
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

// Run consumes messages until ctx is cancelled, consuming again with
// backoff whenever the consumer is lost (the connection reconnects on its
// own). When ctx is cancelled it drains: it stops pulling, hands the
// messages buffered and not dispatched back to the server (nak), lets every
// batch in flight commit and be acknowledged, and returns nil. Abort or
// Config.DrainTimeout cut the drain short (ErrAborted). When the server
// rejects the consumer for good (ErrRejected) Run drains the same way and
// returns that error. Run may be called once.
func (s *Source) Run(ctx context.Context) error {
	if !s.ran.CompareAndSwap(false, true) {
		return errors.New("nats: Source.Run called twice")
	}
	soft, hard, cancelSoft, stop := sourceutil.Drain(ctx, s.abort, s.cfg.DrainTimeout, func() {
		s.log.Warn("nats drain timed out, aborting", "name", s.cfg.Name, "timeout", s.cfg.DrainTimeout)
	})
	defer stop()

	nc, owned, err := s.cfg.connect("inorder " + s.cfg.Name)
	if err != nil {
		return err
	}
	if owned {
		defer nc.Close()
		nc.SetReconnectHandler(func(nc *natsc.Conn) {
			s.stats.reconnects.Add(1)
			s.log.Info("nats reconnected", "name", s.cfg.Name, "server", nc.ConnectedUrlRedacted())
		})
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	s.jsMu.Lock()
	s.js = js
	s.jsMu.Unlock()

	work, stopWork := sourceutil.Work(hard, s.disp)
	defer stopWork()
	var bg sync.WaitGroup
	// In-progress acks and stall checks go on while the drain commits.
	bg.Go(func() { s.progressLoop(work) })
	bg.Go(func() { s.stallLoop(work) })
	s.running.Store(true)
	defer s.running.Store(false)
	if s.cfg.LagEvery > 0 {
		bg.Go(func() { s.lagLoop(soft) })
	}
	if err := s.record(soft); err != nil {
		s.log.Warn("nats source mapping not recorded", "name", s.cfg.Name, "error", err)
	}
	s.log.Info("nats source starting", "name", s.cfg.Name, "stream", s.cfg.Stream, "consumer", s.cfg.Consumer,
		"ack_wait", s.cfg.AckWait, "max_ack_pending", s.cfg.MaxAckPending, "window", s.cfg.ReadAhead)

	rejected := s.consume(soft, hard, js)
	cancelSoft()
	if hard.Err() == nil {
		if err := s.disp.Flush(hard); err != nil {
			s.log.Debug("nats flush cut short", "name", s.cfg.Name, "error", err)
		}
	}
	stopWork()
	bg.Wait()
	if owned {
		// The acks are published asynchronously: send them before closing.
		if err := nc.FlushTimeout(5 * time.Second); err != nil {
			s.log.Debug("nats acks not flushed", "name", s.cfg.Name, "error", err)
		}
	}
	if rejected != nil {
		return rejected
	}
	if hard.Err() != nil {
		return ErrAborted
	}
	s.log.Info("nats source stopped", "name", s.cfg.Name)
	return nil
}

// consume runs sessions until soft is done, with backoff between them
// (from ReconnectMin to ReconnectMax, reset by a session that received
// messages). It returns an error wrapping ErrRejected when the server
// rejects the consumer for good, nil when soft is done.
func (s *Source) consume(soft, hard context.Context, js jetstream.JetStream) error {
	return sourceutil.Sessions{
		Min: s.cfg.ReconnectMin, Max: s.cfg.ReconnectMax, Reconnects: &s.stats.reconnects,
		Session:  func() (bool, error) { return s.session(soft, hard, js) },
		Rejected: s.rejected,
		OnRejected: func(rej error) {
			s.log.Error("nats consumer rejected, stopping", "name", s.cfg.Name, "error", rej)
		},
		OnLost: func(err error, wait time.Duration) {
			s.log.Warn("nats consumer lost, consuming again", "name", s.cfg.Name, "error", err, "in", wait)
		},
	}.Consume(soft)
}

// session binds to the consumer (creating or updating it unless NoCreate)
// and dispatches its messages until the pull is lost or soft is done. At a
// graceful stop it drains the client's buffer, handing those messages back.
func (s *Source) session(soft, hard context.Context, js jetstream.JetStream) (progressed bool, err error) {
	cctx, cancel := context.WithTimeout(soft, 30*time.Second)
	cons, err := s.bind(cctx, js)
	cancel()
	if err != nil {
		return false, err
	}
	it, err := cons.Messages(
		jetstream.PullMaxMessages(s.cfg.PullBatch),
		jetstream.PullExpiry(pullExpiry),
		jetstream.PullHeartbeat(pullHeartbeat),
	)
	if err != nil {
		return false, fmt.Errorf("nats: pull from consumer %s: %w", s.cfg.Consumer, err)
	}
	defer it.Stop()
	// A graceful stop drains the iterator: Next returns what is buffered,
	// then ErrMsgIteratorClosed.
	defer context.AfterFunc(soft, it.Drain)()
	s.stats.sessions.Add(1)
	s.log.Info("nats consuming", "name", s.cfg.Name, "stream", s.cfg.Stream, "consumer", s.cfg.Consumer)
	if s.cfg.OnSubscribed != nil {
		s.cfg.OnSubscribed()
	}
	for {
		m, err := it.Next()
		if err != nil {
			if soft.Err() != nil {
				return progressed, nil
			}
			return progressed, fmt.Errorf("nats: pull from consumer %s: %w", s.cfg.Consumer, err)
		}
		if soft.Err() != nil {
			// Stopping: hand it back at once, for another process.
			if m.Nak() == nil {
				s.stats.nacked.Add(1)
			}
			continue
		}
		progressed = true
		if err := s.receive(hard, m); err != nil {
			return progressed, err
		}
	}
}

// pullExpiry is how long a pull request waits on the server; its idle
// heartbeats, every pullHeartbeat, tell a lost pull from an idle stream:
// two missed, the client pulls again. A pull is lost silently whenever the
// consumer gets a new leader (the leader starts with an empty queue of
// waiting requests: a node killed, an election just after the consumer's
// creation). At the default heartbeat (half of pullExpiry) such a process
// received nothing for 5 s while the others took its share; at
// pullHeartbeat, the least the server accepts, for about a second.
const (
	pullExpiry    = 5 * time.Second
	pullHeartbeat = 500 * time.Millisecond
)

// receive maps a message and dispatches it; it blocks while the window is
// full.
func (s *Source) receive(ctx context.Context, m jetstream.Msg) error {
	now := time.Now()
	s.stats.received.Add(1)
	s.lastRecv.Store(now.UnixNano())
	h := &held{msg: m}
	h.refreshed.Store(now.UnixNano())
	md, mdErr := m.Metadata()
	if mdErr == nil {
		h.seq, h.at, h.delivered = md.Sequence.Stream, md.Timestamp, md.NumDelivered
		s.serverPending.Store(md.NumPending)
		if md.NumDelivered > 1 {
			s.stats.redelivered.Add(1)
		}
	}
	e, err := s.cfg.mapping.event(m.Subject(), m.Headers(), m.Data())
	e.RecordedAt = h.at
	d := &source.Delivery{Event: e, Acker: s.acker, Handle: h}
	if err != nil {
		d.Reject = err
		if len(d.Event.Metadata) == 0 {
			d.Event.Metadata = whereMeta(s.cfg.Stream, m.Subject(), h.seq)
		}
	}
	s.held.add(h)
	if err := s.disp.Dispatch(ctx, d); err != nil {
		h.done.Store(true) // not dispatched: the server delivers it again
		return err
	}
	return nil
}

// whereMeta is the metadata recorded with a rejected message: where it is
// in the stream, for an operator.
func whereMeta(stream, subject string, seq uint64) []byte {
	b := []byte(`{"nats":{"stream":`)
	b = strconv.AppendQuote(b, stream)
	b = append(b, `,"subject":`...)
	b = strconv.AppendQuote(b, subject)
	b = append(b, `,"sequence":`...)
	b = strconv.AppendUint(b, seq, 10)
	return append(b, "}}"...)
}

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
