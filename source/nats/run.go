package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	natsc "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/internal/sourceutil"
)

// This file holds the Source's entry points, New and Run, and what Run
// runs: sessions on the consumer, the drain, the in-progress acks of the
// messages held and the stall check.

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

// progressLoop sends, every AckWait/3, an in-progress ack for each message
// held since the last round: a batch that outlasts AckWait — a slow
// transaction, retries, a full window — keeps its messages, and the server
// does not deliver them to another process meanwhile.
func (s *Source) progressLoop(ctx context.Context) {
	period := s.cfg.AckWait / 3
	sourceutil.Every(ctx, period, false, func() {
		now := time.Now().UnixNano()
		n := 0
		for _, h := range s.held.due(now - int64(period)) {
			if h.done.Load() {
				continue
			}
			if err := h.msg.InProgress(); err != nil {
				continue // gone with the connection: it is delivered again
			}
			h.refreshed.Store(now)
			n++
		}
		if n > 0 {
			s.stats.inProgress.Add(int64(n))
			s.log.Debug("nats in-progress acks sent", "name", s.cfg.Name, "messages", n)
		}
	})
}

// stallAfter is how long without a message, while the server still has
// some for the consumer, means that it holds them back.
func (s *Source) stallAfter() time.Duration {
	return min(max(s.cfg.MaxWait/5, time.Millisecond), 20*time.Millisecond)
}

// stallLoop closes the partial batches at once when the server stops
// delivering although it has messages for the consumer: MaxAckPending is
// reached (by this process and others, or by messages a dead process held
// until their AckWait passes), and nothing comes until some are acked. A
// worker would otherwise wait MaxWait for each batch to fill; the window of
// this process, which would close them too, is not full. Flush settles what
// was dispatched; the acks it sends let the server deliver again.
func (s *Source) stallLoop(ctx context.Context) {
	after := s.stallAfter()
	sourceutil.Every(ctx, after/2, false, func() {
		if s.serverPending.Load() == 0 || s.flushing.Load() {
			return
		}
		if time.Since(time.Unix(0, s.lastRecv.Load())) < after {
			return
		}
		if st := s.disp.Stats(); st.InFlight == 0 || st.InFlight >= st.MaxInFlight {
			return // nothing held, or the window closes batches itself
		}
		s.flushing.Store(true)
		s.stats.kicks.Add(1)
		go func() {
			defer s.flushing.Store(false)
			_ = s.disp.Flush(ctx)
		}()
	})
}
