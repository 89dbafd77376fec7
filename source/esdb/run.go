package esdb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/internal/sourceutil"
)

// This file holds the Source's entry points: New, and Run with its loop of
// sessions (reconnection and drain).

// New validates cfg, applies its defaults and returns a Source. It does not
// connect: Run does.
func New(cfg *Config) (*Source, error) {
	c, err := newConfig(cfg, false)
	if err != nil {
		return nil, err
	}
	s := &Source{
		cfg:     c,
		log:     c.Logger,
		tracker: source.NewTracker[tpos](),
		abort:   make(chan struct{}),
		batchCP: map[*source.Delivery]esdbc.Position{},

		knownMissing: map[string]bool{},
		applied:      map[string]*Point{},
	}
	dc := c.dispCfg
	dc.AfterCommit = s.afterCommit
	if c.Persistent == nil {
		dc.Checkpoints = s.checkpoints
	}
	s.disp, err = source.NewDispatcher(&dc)
	if err != nil {
		return nil, fmt.Errorf("esdb: %w", err)
	}
	return s, nil
}

// Run consumes events until ctx is cancelled, reconnecting with backoff
// whenever the server is lost. When ctx is cancelled it drains: it stops
// receiving, lets every batch in flight commit and be acknowledged, saves
// the checkpoint, and returns nil. Abort or Config.DrainTimeout cut the drain
// short (ErrAborted). When the server rejects the subscription for good
// (ErrRejected: access denied, a group that must not be created…) Run drains
// the same way and returns that error at once instead of retrying. Run may
// be called once.
func (s *Source) Run(ctx context.Context) error {
	if !s.ran.CompareAndSwap(false, true) {
		return errors.New("esdb: Source.Run called twice")
	}
	soft, hard, cancelSoft, stop := sourceutil.Drain(ctx, s.abort, s.cfg.DrainTimeout, func() {
		s.log.Warn("esdb drain timed out, aborting", "name", s.cfg.Name, "timeout", s.cfg.DrainTimeout)
	})
	defer stop()

	_, stopWork := sourceutil.Work(hard, s.disp)
	defer stopWork()
	var bg sync.WaitGroup
	if s.cfg.Persistent == nil {
		bg.Go(func() { s.saveLoop(soft) })
	}
	if s.cfg.RepairAfter > 0 {
		bg.Go(func() { s.repairLoop(soft) })
	}
	s.running.Store(true)
	defer s.running.Store(false)
	defer s.stopped.Store(true)
	if s.cfg.LagEvery > 0 {
		bg.Go(func() { s.lagLoop(soft) })
	}
	s.log.Info("esdb source starting", "name", s.cfg.Name, "mode", s.mode())
	if err := s.record(soft); err != nil {
		// Repairs and rebuilds run from elsewhere then need the mapping
		// flags; the workers themselves are fine.
		s.log.Warn("esdb source could not record its mapping", "name", s.cfg.Name, "error", err)
	}

	rejected := s.consume(soft, hard)
	cancelSoft() // the background loops stop too when the server rejected us

	if s.cfg.Persistent == nil && hard.Err() == nil {
		if err := s.saveWatermark(hard); err != nil {
			s.log.Warn("esdb final checkpoint not saved", "name", s.cfg.Name, "error", err)
		}
	}
	stopWork()
	bg.Wait()
	if rejected != nil {
		return rejected
	}
	if hard.Err() != nil {
		return ErrAborted
	}
	s.log.Info("esdb source stopped", "name", s.cfg.Name)
	return nil
}

// consume runs sessions until soft is done, with backoff between them
// (internal/retry, from ReconnectMin to ReconnectMax, reset by a session that
// received events). It returns an error wrapping ErrRejected when the server
// rejects the subscription for good, nil when soft is done.
func (s *Source) consume(soft, hard context.Context) error {
	return sourceutil.Sessions{
		Min: s.cfg.ReconnectMin, Max: s.cfg.ReconnectMax, Reconnects: &s.stats.reconnects,
		Session:  func() (bool, error) { return s.session(soft, hard) },
		Rejected: s.rejected,
		OnRejected: func(rej error) {
			s.log.Error("esdb subscription rejected, stopping", "name", s.cfg.Name, "error", rej)
		},
		OnLost: func(err error, wait time.Duration) {
			s.log.Warn("esdb subscription lost, reconnecting", "name", s.cfg.Name, "error", err, "in", wait)
		},
	}.Consume(soft)
}

// session connects, subscribes and dispatches until the subscription is lost
// or soft is done; before returning it settles everything it dispatched.
// progressed reports whether it received any event.
func (s *Source) session(soft, hard context.Context) (progressed bool, err error) {
	client, err := s.cfg.newClient()
	if err != nil {
		return false, err
	}
	defer client.Close()
	if s.cfg.Persistent != nil {
		return s.persistentSession(soft, hard, client)
	}
	return s.catchUpSession(soft, hard, client)
}
