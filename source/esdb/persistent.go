package esdb

import (
	"context"
	"errors"
	"fmt"
	"sync"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/inorder/inorder/source"
)

// This file holds persistent sessions: subscribing to the group (creating it
// if missing) and acknowledging on it.

// persistentSession runs one connection to the persistent subscription
// group, creating the group if it is missing.
func (s *Source) persistentSession(soft, hard context.Context, client *esdbc.Client) (progressed bool, err error) {
	subCtx, cancelSub := context.WithCancel(hard)
	defer cancelSub()
	sub, err := s.subscribePersistent(subCtx, client)
	if err != nil {
		return false, err
	}
	acker := &psAcker{s: s, sub: sub}
	msgs, stopPump := pump(sub.Recv, func(e *esdbc.PersistentSubscriptionEvent) bool { return e.SubscriptionDropped != nil },
		func(err error) *esdbc.PersistentSubscriptionEvent {
			return &esdbc.PersistentSubscriptionEvent{SubscriptionDropped: &esdbc.SubscriptionDropped{Error: err}}
		})
	defer func() {
		// Stop reading, but keep the subscription open until the batches
		// in flight are acknowledged.
		if err := s.disp.Flush(hard); err != nil {
			s.log.Debug("esdb flush cut short", "name", s.cfg.Name, "error", err)
		}
		acker.close()
		stopPump()
	}()
	s.log.Info("esdb subscribed to persistent group", "name", s.cfg.Name, "group", s.cfg.Persistent.Group, "stream", streamOrAll(s.cfg.Persistent.Stream))
	return receive(soft, s, msgs, func(m *esdbc.PersistentSubscriptionEvent) (bool, error) {
		switch {
		case m.SubscriptionDropped != nil:
			return false, fmt.Errorf("esdb: persistent subscription dropped: %w", m.SubscriptionDropped.Error)
		case m.EventAppeared != nil && m.EventAppeared.Event != nil:
			return true, s.persistentEvent(hard, m.EventAppeared.Event, acker)
		}
		return false, nil
	})
}

func (s *Source) persistentEvent(ctx context.Context, ev *esdbc.ResolvedEvent, acker *psAcker) error {
	s.stats.received.Add(1)
	e, err := s.cfg.mapEvent(ev.Event)
	if errors.Is(err, ErrSkipped) {
		s.stats.skipped.Add(1)
		acker.ack([]*esdbc.ResolvedEvent{ev})
		return nil
	}
	d := &source.Delivery{Event: e, Acker: acker, Handle: ev}
	if err != nil {
		d.Reject = err
	}
	return s.disp.Dispatch(ctx, d)
}

func (s *Source) subscribePersistent(ctx context.Context, client *esdbc.Client) (*esdbc.PersistentSubscription, error) {
	p := s.cfg.Persistent
	opts := esdbc.SubscribeToPersistentSubscriptionOptions{BufferSize: p.BufferSize}
	connect := func() (*esdbc.PersistentSubscription, error) {
		if p.Stream == "" {
			return client.SubscribeToPersistentSubscriptionToAll(ctx, p.Group, opts)
		}
		return client.SubscribeToPersistentSubscription(ctx, p.Stream, p.Group, opts)
	}
	sub, err := connect()
	if err == nil {
		return sub, nil
	}
	if p.NoCreate || !hasCode(err, esdbc.ErrorCodeResourceNotFound) {
		return nil, fmt.Errorf("esdb: subscribe to group %s: %w", p.Group, err)
	}
	switch strategy, err := s.createGroup(ctx, client); {
	case err == nil:
		s.log.Info("esdb created persistent subscription group", "name", s.cfg.Name, "group", p.Group,
			"stream", streamOrAll(p.Stream), "strategy", strategy)
	case !hasCode(err, esdbc.ErrorCodeResourceAlreadyExists):
		return nil, fmt.Errorf("esdb: create group %s: %w", p.Group, err)
	}
	sub, err = connect()
	if err != nil {
		return nil, fmt.Errorf("esdb: subscribe to group %s: %w", p.Group, err)
	}
	return sub, nil
}

// createGroup creates the group and returns the consumer strategy it was
// created with.
func (s *Source) createGroup(ctx context.Context, client *esdbc.Client) (esdbc.ConsumerStrategy, error) {
	p := s.cfg.Persistent
	settings := *p.Settings
	pinned := func(st esdbc.ConsumerStrategy) bool {
		return st == esdbc.ConsumerStrategyPinned || st == "PinnedByCorrelation"
	}
	if s.cfg.autoStrategy || pinned(settings.ConsumerStrategyName) {
		fixed, version := serverVersion(client)
		switch {
		case s.cfg.autoStrategy && fixed:
			settings.ConsumerStrategyName = esdbc.ConsumerStrategyPinned
		case s.cfg.autoStrategy:
			settings.ConsumerStrategyName = esdbc.ConsumerStrategyRoundRobin
			s.log.Warn("esdb creates the persistent subscription group with the RoundRobin strategy: "+
				"this server release can write wrong checkpoints for Pinned groups (kurrent-io/KurrentDB#5497; fixed in 24.10.14, 26.0.3 and 26.1.0). "+
				"Competing consumers of a RoundRobin group receive one aggregate's events in turn, and park those that arrive before their predecessor",
				"name", s.cfg.Name, "group", p.Group, "server_version", version)
		case !fixed:
			s.log.Warn("esdb creates the persistent subscription group with a pinned strategy on a server release "+
				"that can write wrong checkpoints for it (kurrent-io/KurrentDB#5497; fixed in 24.10.14, 26.0.3 and 26.1.0): "+
				"after a server restart the group may skip events, which gap repair can read back only when a later version arrives",
				"name", s.cfg.Name, "group", p.Group, "strategy", settings.ConsumerStrategyName, "server_version", version)
		}
	}
	return settings.ConsumerStrategyName, s.createGroupWith(ctx, client, &settings)
}

// serverVersion reports whether the server has the fix of Pinned groups'
// checkpoints (PinnedCheckpointsFixed), and its version for the log
// ("unknown" when it does not say).
func serverVersion(client *esdbc.Client) (fixed bool, version string) {
	v, err := client.GetServerVersion()
	if err != nil || v == nil || *v == (esdbc.ServerVersion{}) {
		return false, "unknown"
	}
	return PinnedCheckpointsFixed(*v), fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
}

// PinnedCheckpointsFixed reports whether an EventStoreDB or KurrentDB server
// of version v has the fix of kurrent-io/KurrentDB#5497 (DB-1912): before
// it, a Pinned persistent subscription group could write a checkpoint past
// events it had not delivered, and skip them after a restart. The fix is in
// KurrentDB 26.1.0 and later, 26.0.3 and later 26.0 releases, and 24.10.14
// and later 24.10 releases; 25.x and earlier releases do not have it. A
// source that creates its group with the default settings uses Pinned only
// on a server with the fix.
func PinnedCheckpointsFixed(v esdbc.ServerVersion) bool {
	switch {
	case v.Major > 26:
		return true
	case v.Major == 26:
		return v.Minor >= 1 || v.Patch >= 3
	case v.Major == 24 && v.Minor == 10:
		return v.Patch >= 14
	}
	return false
}

func (s *Source) createGroupWith(ctx context.Context, client *esdbc.Client, settings *esdbc.PersistentSubscriptionSettings) error {
	p := s.cfg.Persistent
	if p.Stream == "" {
		var from esdbc.AllPosition = esdbc.Start{}
		if s.cfg.FromEnd {
			from = esdbc.End{}
		}
		return client.CreatePersistentSubscriptionToAll(ctx, p.Group, esdbc.PersistentAllSubscriptionOptions{
			Settings: settings, StartFrom: from, Filter: s.cfg.filter,
		})
	}
	var from esdbc.StreamPosition = esdbc.Start{}
	if s.cfg.FromEnd {
		from = esdbc.End{}
	}
	return client.CreatePersistentSubscription(ctx, p.Stream, p.Group, esdbc.PersistentStreamSubscriptionOptions{
		Settings: settings, StartFrom: from,
	})
}

// psAcker acknowledges on one persistent subscription. gRPC forbids
// concurrent sends on a stream, so sends are serialised; once the
// subscription is closed they are dropped (the server redelivers).
type psAcker struct {
	s      *Source
	mu     sync.Mutex
	sub    *esdbc.PersistentSubscription
	closed bool
}

func handles(ds []*source.Delivery) []*esdbc.ResolvedEvent {
	evs := make([]*esdbc.ResolvedEvent, len(ds))
	for i, d := range ds {
		evs[i] = d.Handle.(*esdbc.ResolvedEvent)
	}
	return evs
}

func (a *psAcker) Ack(ds []*source.Delivery) { a.ack(handles(ds)) }

func (a *psAcker) ack(evs []*esdbc.ResolvedEvent) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return
	}
	if err := a.sub.Ack(evs...); err != nil {
		a.s.log.Debug("esdb ack not sent", "name", a.s.cfg.Name, "error", err)
		return
	}
	a.s.stats.acked.Add(int64(len(evs)))
}

func (a *psAcker) Nack(ds []*source.Delivery, cause error) bool {
	reason := cause.Error()
	if len(reason) > 200 {
		reason = reason[:200]
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return true // the server redelivers what a closed consumer held
	}
	if err := a.sub.Nack(reason, esdbc.NackActionRetry, handles(ds)...); err != nil {
		a.s.log.Debug("esdb nack not sent", "name", a.s.cfg.Name, "error", err)
		return true
	}
	a.s.stats.nacked.Add(int64(len(ds)))
	return true
}

func (a *psAcker) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed {
		a.closed = true
		_ = a.sub.Close()
	}
}
