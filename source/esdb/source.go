package esdb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// tpos is a catch-up position in the tracker, with the creation time of its
// event (zero for positions that were passed).
type tpos struct {
	esdbc.Position
	at time.Time
}

// ErrAborted is returned by Run when its drain was cut short by Abort or
// Config.DrainTimeout: the batches in flight were rolled back, and their
// events are delivered again on the next run.
var ErrAborted = errors.New("esdb: drain aborted")

// Source feeds a projection.Processor from EventStoreDB, through a catch-up
// subscription to $all or a persistent subscription. See the package
// documentation.
type Source struct {
	cfg     *config
	log     *slog.Logger
	disp    *source.Dispatcher
	tracker *source.Tracker[tpos]
	ran     atomic.Bool

	abort     chan struct{}
	abortOnce sync.Once

	cpMu     sync.Mutex
	saved    esdbc.Position // highest checkpoint known to be committed
	hasSaved bool
	batchCP  map[*source.Delivery]esdbc.Position // checkpoint written by a batch's transaction, by its first delivery

	// knownMissing holds the gaps gap repair recorded as missing at the
	// source (owned by the repair goroutine).
	knownMissing map[string]bool

	running atomic.Bool // Run is consuming
	lagMu   sync.Mutex
	probe   lagProbe          // the last lag measurement
	applied map[string]*Point // per projection, the newest event applied

	stats struct {
		received, skipped, rejected, acked, nacked, reconnects, repaired, gapsMissing atomic.Int64
	}
}

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
		dc.BeforeCommit = s.beforeCommit
	}
	s.disp, err = source.NewDispatcher(&dc)
	if err != nil {
		return nil, fmt.Errorf("esdb: %w", err)
	}
	return s, nil
}

// Stats are a Source's cumulative counters, for metrics.
type Stats struct {
	// Received counts events received from subscriptions, redeliveries
	// included.
	Received int64
	// Skipped counts events acknowledged without processing: system
	// events, streams outside the mapping, types outside TypeRegex.
	Skipped int64
	// Rejected counts deliveries recorded as rejected, by the source
	// (content that is not JSON…) or by the processor's validation.
	Rejected int64
	// Acked counts deliveries acknowledged: skipped ones at once, the
	// others after their batch committed (in catch-up mode, where nothing
	// is sent to the server, when they are marked done in the watermark's
	// tracking).
	Acked int64
	// Nacked counts deliveries nacked for a retry after a failed batch
	// (persistent mode).
	Nacked int64
	// Reconnects counts connection attempts after the first.
	Reconnects int64
	// Batches counts committed batches.
	Batches int64
	// Repaired counts events read by gap repair and processed.
	Repaired int64
	// GapsMissing counts gaps that gap repair recorded as missing at the
	// source.
	GapsMissing int64
	// Checkpoint is the highest checkpoint known to be saved (catch-up
	// mode); HasCheckpoint is false until there is one.
	Checkpoint    esdbc.Position
	HasCheckpoint bool
	// InFlight counts deliveries received and not yet settled (committed
	// and acknowledged, or nacked).
	InFlight int
	// Dispatch are the workers' figures: batches by close reason and fill,
	// the window (InFlight of MaxInFlight), the time workers waited for
	// input.
	Dispatch source.Stats
}

// Stats returns the source's counters.
func (s *Source) Stats() Stats {
	s.cpMu.Lock()
	cp, ok := s.saved, s.hasSaved
	s.cpMu.Unlock()
	ds := s.disp.Stats()
	return Stats{
		Received:      s.stats.received.Load(),
		Skipped:       s.stats.skipped.Load(),
		Rejected:      s.stats.rejected.Load(),
		Acked:         s.stats.acked.Load(),
		Nacked:        s.stats.nacked.Load(),
		Reconnects:    s.stats.reconnects.Load(),
		Batches:       ds.Committed,
		Repaired:      s.stats.repaired.Load(),
		GapsMissing:   s.stats.gapsMissing.Load(),
		Checkpoint:    cp,
		HasCheckpoint: ok,
		InFlight:      ds.InFlight,
		Dispatch:      ds,
	}
}

// Abort cuts a graceful stop short — the second signal: the batches in
// flight are rolled back and Run returns ErrAborted. Called before Run's
// context is cancelled, it stops Run at once. It is safe to call more than
// once, from any goroutine.
func (s *Source) Abort() { s.abortOnce.Do(func() { close(s.abort) }) }

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
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	go func() {
		select {
		case <-s.abort:
			cancelHard()
		case <-hard.Done():
		}
	}()
	defer context.AfterFunc(ctx, func() {
		t := time.NewTimer(s.cfg.DrainTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			s.log.Warn("esdb drain timed out, aborting", "name", s.cfg.Name, "timeout", s.cfg.DrainTimeout)
			cancelHard()
		case <-hard.Done():
		}
	})()
	soft, cancelSoft := context.WithCancel(ctx)
	defer cancelSoft()
	defer context.AfterFunc(hard, cancelSoft)()

	work, stopWork := context.WithCancel(hard)
	defer stopWork()
	dispDone := make(chan struct{})
	go func() {
		defer close(dispDone)
		_ = s.disp.Run(work)
	}()
	var bg sync.WaitGroup
	if s.cfg.Persistent == nil {
		bg.Go(func() { s.saveLoop(soft) })
	}
	if s.cfg.RepairAfter > 0 {
		bg.Go(func() { s.repairLoop(soft) })
	}
	s.running.Store(true)
	defer s.running.Store(false)
	if s.cfg.LagEvery > 0 {
		bg.Go(func() { s.lagLoop(soft) })
	}
	s.log.Info("esdb source starting", "name", s.cfg.Name, "mode", s.mode())

	rejected := s.consume(soft, hard)
	cancelSoft() // the background loops stop too when the server rejected us

	if s.cfg.Persistent == nil && hard.Err() == nil {
		if err := s.saveWatermark(hard); err != nil {
			s.log.Warn("esdb final checkpoint not saved", "name", s.cfg.Name, "error", err)
		}
	}
	stopWork()
	<-dispDone
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

func (s *Source) mode() string {
	if s.cfg.Persistent != nil {
		return "persistent"
	}
	return "catch-up"
}

// consume runs sessions until soft is done, with backoff between them
// (internal/retry, from ReconnectMin to ReconnectMax, reset by a session that
// received events). It returns an error wrapping ErrRejected when the server
// rejects the subscription for good, nil when soft is done.
func (s *Source) consume(soft, hard context.Context) error {
	backoff := retry.Policy{Initial: s.cfg.ReconnectMin, Max: s.cfg.ReconnectMax, MaxElapsed: -1}.Start()
	for attempt := 0; soft.Err() == nil; attempt++ {
		if attempt > 0 {
			s.stats.reconnects.Add(1)
		}
		progressed, err := s.session(soft, hard)
		if soft.Err() != nil {
			return nil
		}
		if rej := s.rejected(err); rej != nil {
			s.log.Error("esdb subscription rejected, stopping", "name", s.cfg.Name, "error", rej)
			return rej
		}
		if progressed {
			backoff.Reset()
		}
		wait, _ := backoff.Next()
		s.log.Warn("esdb subscription lost, reconnecting", "name", s.cfg.Name, "error", err, "in", wait)
		_ = retry.Sleep(soft, wait)
	}
	return nil
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
	if s.cfg.OnSubscribed != nil {
		s.cfg.OnSubscribed()
	}
	acker := &catchUpAcker{s: s}
	for {
		var m *esdbc.SubscriptionEvent
		select {
		case <-soft.Done():
			return progressed, nil
		case m = <-msgs:
		}
		switch {
		case m.SubscriptionDropped != nil:
			return progressed, fmt.Errorf("esdb: subscription dropped: %w", m.SubscriptionDropped.Error)
		case m.EventAppeared != nil:
			progressed = true
			// Dispatch until hard: what was received is processed, even
			// while draining.
			if err := s.catchUpEvent(hard, m.EventAppeared, acker); err != nil {
				return progressed, err
			}
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
	}
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

// beforeCommit saves, in the batch's transaction, the low watermark that
// includes the batch's own deliveries.
func (s *Source) beforeCommit(ctx context.Context, tx pgx.Tx, batch []*source.Delivery) error {
	tickets := make([]source.Ticket, 0, len(batch))
	for _, d := range batch {
		if d.Ticket != 0 {
			tickets = append(tickets, d.Ticket)
		}
	}
	tp, ok := s.tracker.WatermarkWith(tickets)
	p := tp.Position
	if !ok || s.covered(p) {
		return nil
	}
	if err := s.cfg.Processor.SaveCheckpointTx(ctx, tx, s.cfg.Name, encodePosition(p)); err != nil {
		return fmt.Errorf("esdb: %w", err)
	}
	s.cpMu.Lock()
	s.batchCP[batch[0]] = p
	s.cpMu.Unlock()
	return nil
}

// afterCommit counts and reports a committed batch.
func (s *Source) afterCommit(batch []*source.Delivery, results []projection.Result) {
	outcomes := map[projection.Outcome]int{}
	rejected := 0
	for _, d := range batch {
		if d.Reject != nil {
			rejected++
		}
	}
	outcomes[projection.Rejected] = rejected
	for _, r := range results {
		outcomes[r.Outcome]++
	}
	s.stats.rejected.Add(int64(outcomes[projection.Rejected]))
	s.noteApplied(batch, results)
	var cp *esdbc.Position
	if s.cfg.Persistent == nil {
		s.cpMu.Lock()
		if p, ok := s.batchCP[batch[0]]; ok {
			delete(s.batchCP, batch[0])
			if s.advanceLocked(p) {
				cp = &p
			}
		}
		s.cpMu.Unlock()
	}
	if s.cfg.OnCommit != nil {
		s.cfg.OnCommit(Commit{Deliveries: len(batch), Outcomes: outcomes, Checkpoint: cp})
	}
}

// covered reports whether p is at or below the saved checkpoint.
func (s *Source) covered(p esdbc.Position) bool {
	s.cpMu.Lock()
	defer s.cpMu.Unlock()
	return s.hasSaved && !less(s.saved, p)
}

// advanceLocked notes a committed checkpoint; if it is ahead of the saved
// one it becomes the saved one, OnCheckpoint is told (under s.cpMu, so calls
// are ordered and never overlap) and it returns true.
func (s *Source) advanceLocked(p esdbc.Position) bool {
	if s.hasSaved && !less(s.saved, p) {
		return false
	}
	s.saved, s.hasSaved = p, true
	if s.cfg.OnCheckpoint != nil {
		s.cfg.OnCheckpoint(p)
	}
	return true
}

// saveLoop saves the watermark every CheckpointEvery when it moved without a
// batch saving it: filtered-out events and server checkpoints.
func (s *Source) saveLoop(ctx context.Context) {
	s.every(ctx, s.cfg.CheckpointEvery, false, slog.LevelWarn, "esdb checkpoint not saved", s.saveWatermark)
}

// every calls fn every d until ctx is done — first at once when now is set
// — and logs its errors at level with msg, except those of ctx's end.
func (s *Source) every(ctx context.Context, d time.Duration, now bool, level slog.Level, msg string, fn func(context.Context) error) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		if now {
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				s.log.Log(ctx, level, msg, "name", s.cfg.Name, "error", err)
			}
		}
		now = true
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// saveWatermark saves the tracker's watermark if it is ahead of the saved
// checkpoint.
func (s *Source) saveWatermark(ctx context.Context) error {
	tp, ok := s.tracker.Watermark()
	p := tp.Position
	if !ok || s.covered(p) {
		return nil
	}
	if err := s.cfg.Processor.SaveCheckpoint(ctx, s.cfg.Name, encodePosition(p)); err != nil {
		return fmt.Errorf("esdb: %w", err)
	}
	s.cpMu.Lock()
	s.advanceLocked(p)
	s.cpMu.Unlock()
	return nil
}

// loadCheckpoint reads the committed checkpoint.
func (s *Source) loadCheckpoint(ctx context.Context) (esdbc.Position, bool, error) {
	raw, ok, err := s.cfg.Processor.LoadCheckpoint(ctx, s.cfg.Name)
	if err != nil || !ok {
		return esdbc.Position{}, false, err
	}
	pos, err := decodePosition(raw)
	if err != nil {
		return esdbc.Position{}, false, fmt.Errorf("esdb: checkpoint %s: %w", s.cfg.Name, err)
	}
	s.cpMu.Lock()
	if !s.hasSaved || less(s.saved, pos) {
		s.saved, s.hasSaved = pos, true
	}
	s.cpMu.Unlock()
	return pos, true, nil
}

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
	if s.cfg.OnSubscribed != nil {
		s.cfg.OnSubscribed()
	}
	for {
		var m *esdbc.PersistentSubscriptionEvent
		select {
		case <-soft.Done():
			return progressed, nil
		case m = <-msgs:
		}
		switch {
		case m.SubscriptionDropped != nil:
			return progressed, fmt.Errorf("esdb: persistent subscription dropped: %w", m.SubscriptionDropped.Error)
		case m.EventAppeared != nil && m.EventAppeared.Event != nil:
			progressed = true
			if err := s.persistentEvent(hard, m.EventAppeared.Event, acker); err != nil {
				return progressed, err
			}
		}
	}
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
	if err := s.createGroup(ctx, client); err != nil && !hasCode(err, esdbc.ErrorCodeResourceAlreadyExists) {
		return nil, fmt.Errorf("esdb: create group %s: %w", p.Group, err)
	}
	s.log.Info("esdb created persistent subscription group", "name", s.cfg.Name, "group", p.Group, "stream", streamOrAll(p.Stream))
	sub, err = connect()
	if err != nil {
		return nil, fmt.Errorf("esdb: subscribe to group %s: %w", p.Group, err)
	}
	return sub, nil
}

func (s *Source) createGroup(ctx context.Context, client *esdbc.Client) error {
	p := s.cfg.Persistent
	settings := *p.Settings
	if p.Stream == "" {
		var from esdbc.AllPosition = esdbc.Start{}
		if s.cfg.FromEnd {
			from = esdbc.End{}
		}
		return client.CreatePersistentSubscriptionToAll(ctx, p.Group, esdbc.PersistentAllSubscriptionOptions{
			Settings: &settings, StartFrom: from, Filter: s.cfg.filter,
		})
	}
	var from esdbc.StreamPosition = esdbc.Start{}
	if s.cfg.FromEnd {
		from = esdbc.End{}
	}
	return client.CreatePersistentSubscription(ctx, p.Stream, p.Group, esdbc.PersistentStreamSubscriptionOptions{
		Settings: &settings, StartFrom: from,
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

// pump turns a blocking Recv into a channel. stop ends it; the subscription
// must be closed first so that a pending Recv returns. A panic in the client
// (it panics on messages it does not expect) becomes a drop.
func pump[T any](recv func() *T, last func(*T) bool, drop func(error) *T) (<-chan *T, func()) {
	ch := make(chan *T)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m := safeRecv(recv, drop)
			select {
			case ch <- m:
			case <-stop:
				return
			}
			if last(m) {
				return
			}
		}
	}()
	var once sync.Once
	return ch, func() {
		once.Do(func() { close(stop) })
		<-done
	}
}

func safeRecv[T any](recv func() *T, drop func(error) *T) (m *T) {
	defer func() {
		if r := recover(); r != nil {
			m = drop(fmt.Errorf("esdb client panicked: %v", r))
		}
	}()
	return recv()
}

// hasCode reports whether err is an *esdbc.Error with the given code.
func hasCode(err error, code esdbc.ErrorCode) bool {
	var e *esdbc.Error
	return errors.As(err, &e) && e.Code() == code
}

func less(a, b esdbc.Position) bool {
	return a.Commit < b.Commit || (a.Commit == b.Commit && a.Prepare < b.Prepare)
}

func fmtPosition(p esdbc.AllPosition) string {
	switch p := p.(type) {
	case esdbc.Position:
		return fmt.Sprintf("C:%d/P:%d", p.Commit, p.Prepare)
	case esdbc.End:
		return "end"
	default:
		return "start"
	}
}

func streamOrAll(stream string) string {
	if stream == "" {
		return "$all"
	}
	return stream
}

// encodePosition encodes an $all position for the checkpoints table as
// C:<commit>/P:<prepare>, both zero-padded to 20 digits, so byte order is
// stream order and operators can read it.
func encodePosition(p esdbc.Position) projection.Position {
	return projection.Position(fmt.Sprintf("C:%020d/P:%020d", p.Commit, p.Prepare))
}

// decodePosition is the inverse of encodePosition.
func decodePosition(b projection.Position) (esdbc.Position, error) {
	var p esdbc.Position
	if len(b) != 45 {
		return p, fmt.Errorf("not an EventStoreDB position: %q", b)
	}
	if _, err := fmt.Sscanf(string(b), "C:%20d/P:%20d", &p.Commit, &p.Prepare); err != nil {
		return p, fmt.Errorf("not an EventStoreDB position: %q: %w", b, err)
	}
	return p, nil
}
