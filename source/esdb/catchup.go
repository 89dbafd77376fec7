package esdb

import (
	"context"
	"errors"
	"fmt"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/inorder/inorder/source"
)

// This file holds catch-up sessions: a subscription to $all from the
// committed checkpoint (checkpoint.go).

// catchUpSession runs one catch-up subscription to $all from the committed
// checkpoint.
func (s *Source) catchUpSession(soft, hard context.Context, client *esdbc.Client) (progressed bool, err error) {
	cp, ok, err := s.loadCheckpoint(soft)
	if err != nil {
		return false, err
	}
	s.tracker.Reset(tpos{Position: cp}, ok)
	var from esdbc.AllPosition = esdbc.Start{}
	switch {
	case ok:
		from = cp // exclusive: the checkpoint is processed
	case s.cfg.FromEnd:
		from = esdbc.End{}
	}
	subCtx, cancelSub := context.WithCancel(hard)
	defer cancelSub()
	sub, err := client.SubscribeToAll(subCtx, esdbc.SubscribeToAllOptions{From: from, Filter: s.cfg.filter})
	if err != nil {
		return false, fmt.Errorf("esdb: subscribe to $all: %w", err)
	}
	msgs, stopPump := pump(sub.Recv, func(e *esdbc.SubscriptionEvent) bool { return e.SubscriptionDropped != nil },
		func(err error) *esdbc.SubscriptionEvent {
			return &esdbc.SubscriptionEvent{SubscriptionDropped: &esdbc.SubscriptionDropped{Error: err}}
		})
	defer func() {
		_ = sub.Close()
		stopPump()
		// Settle what was dispatched and save the watermark, so that the
		// next session starts from a checkpoint that covers it.
		if err := s.disp.Flush(hard); err != nil {
			s.log.Debug("esdb flush cut short", "name", s.cfg.Name, "error", err)
			return
		}
		if err := s.saveWatermark(hard); err != nil {
			s.log.Warn("esdb checkpoint not saved", "name", s.cfg.Name, "error", err)
		}
	}()
	s.log.Info("esdb subscribed to $all", "name", s.cfg.Name, "from", fmtPosition(from))
	acker := &catchUpAcker{s: s}
	return receive(soft, s, msgs, func(m *esdbc.SubscriptionEvent) (bool, error) {
		switch {
		case m.SubscriptionDropped != nil:
			return false, fmt.Errorf("esdb: subscription dropped: %w", m.SubscriptionDropped.Error)
		case m.EventAppeared != nil:
			// Dispatch until hard: what was received is processed, even
			// while draining.
			return true, s.catchUpEvent(hard, m.EventAppeared, acker)
		case m.CheckPointReached != nil:
			if s.cfg.TrustServerCheckpoints {
				s.tracker.Pass(tpos{Position: *m.CheckPointReached})
			}
		case m.CaughtUp != nil:
			s.log.Debug("esdb caught up", "name", s.cfg.Name)
			if s.cfg.OnCaughtUp != nil {
				s.cfg.OnCaughtUp()
			}
		}
		return false, nil
	})
}

func (s *Source) catchUpEvent(ctx context.Context, ev *esdbc.ResolvedEvent, acker *catchUpAcker) error {
	s.stats.received.Add(1)
	orig := ev.OriginalEvent()
	if orig == nil {
		return nil
	}
	pos := orig.Position
	e, err := s.cfg.mapEvent(ev.Event)
	if errors.Is(err, ErrSkipped) {
		s.stats.skipped.Add(1)
		s.stats.acked.Add(1)
		s.tracker.Pass(tpos{Position: pos})
		return nil
	}
	d := &source.Delivery{Event: e, Acker: acker, Ticket: s.tracker.Track(tpos{pos, orig.CreatedDate}), Handle: ev}
	if err != nil {
		d.Reject = err
	}
	return s.disp.Dispatch(ctx, d)
}

// catchUpAcker marks committed deliveries done in the tracker. A catch-up
// subscription cannot redeliver: failed batches are retried in place.
type catchUpAcker struct{ s *Source }

func (a *catchUpAcker) Ack(ds []*source.Delivery) {
	tickets := make([]source.Ticket, len(ds))
	for i, d := range ds {
		tickets[i] = d.Ticket
	}
	a.s.tracker.Done(tickets...)
	a.s.stats.acked.Add(int64(len(ds)))
}

func (a *catchUpAcker) Nack([]*source.Delivery, error) bool { return false }
