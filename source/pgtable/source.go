package pgtable

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/internal/sourceutil"
)

// ErrAborted is returned by Run when its drain was cut short by Abort or
// Config.DrainTimeout: the batches in flight rolled back, and their rows
// are read again by the next run. It wraps source.ErrAborted.
var ErrAborted = fmt.Errorf("pgtable: %w", source.ErrAborted)

// Source feeds a projection.Processor from an events table. See the
// package documentation.
type Source struct {
	cfg  *config
	pool *pgxpool.Pool
	log  *slog.Logger
	disp *source.Dispatcher
	ran  atomic.Bool

	abort     chan struct{}
	abortOnce sync.Once

	mu    sync.Mutex
	parts map[int]*part // the partitions this process holds and reads
	ready atomic.Bool

	lagMu sync.Mutex
	lag   source.Lag
	// The transaction holding back the snapshot horizon (horizon.go).
	blocker       Blocker
	blocked       bool
	blockerLogged time.Time

	stats struct {
		read, batches, leases, released, reconnects atomic.Int64
	}
}

// part is a partition this process holds.
type part struct {
	k       int
	name    string // its checkpoint row
	tracker *source.Tracker[pos]
	wake    chan struct{} // cap 1
	cancel  context.CancelFunc
	done    chan struct{} // closed when its reader returned
	// saved is the highest position known to be stored (under Source.mu).
	saved    pos
	hasSaved bool
}

// New validates cfg and returns a Source; Run starts it.
func New(cfg *Config) (*Source, error) {
	c, err := newConfig(cfg, true)
	if err != nil {
		return nil, err
	}
	s := &Source{cfg: c, log: c.Logger.With("source", c.Name), abort: make(chan struct{}), parts: map[int]*part{}}
	if s.pool = c.Pool; s.pool == nil {
		if s.pool, err = pgxpool.New(context.Background(), c.URL); err != nil {
			return nil, fmt.Errorf("pgtable: %w", err)
		}
		c.ownPool = true
	}
	s.disp, err = source.NewDispatcher(&source.Config{
		Processor: c.Processor, Source: c.Name, Workers: c.Workers, BatchSize: c.BatchSize, MaxWait: c.MaxWait,
		MaxInFlight: c.MaxInFlight, Logger: c.Logger, Checkpoints: s.checkpoints, AfterCommit: s.afterCommit,
		// A partition is a part of the aggregate space that one process
		// reads at a time (its lease).
		Exclusive: true,
	})
	if err != nil {
		return nil, fmt.Errorf("pgtable: %w", err)
	}
	return s, nil
}

// checkpointName is the checkpoint row of partition k.
func (s *Source) checkpointName(k int) string { return fmt.Sprintf("%s/%d", s.cfg.Name, k) }

// checkpoints returns, for each partition with deliveries in batch, its
// low watermark with the batch's deliveries counted as committed: what the
// batch's transaction stores.
func (s *Source) checkpoints(batch []*source.Delivery) []projection.Checkpoint {
	var cps []projection.Checkpoint
	for p, tickets := range byPart(batch) {
		if wm, ok := p.tracker.WatermarkWith(tickets); ok {
			cps = append(cps, projection.Checkpoint{Name: p.name, Position: wm.encode()})
		}
	}
	return cps
}

// afterCommit marks a committed batch's deliveries done.
func (s *Source) afterCommit(batch []*source.Delivery, _ []projection.Result) {
	s.stats.batches.Add(1)
	for p, tickets := range byPart(batch) {
		p.tracker.Done(tickets...)
	}
}

func byPart(batch []*source.Delivery) map[*part][]source.Ticket {
	out := map[*part][]source.Ticket{}
	for _, d := range batch {
		if p, ok := d.Handle.(*part); ok {
			out[p] = append(out[p], d.Ticket)
		}
	}
	return out
}

// Abort cuts a graceful stop short: the batches in flight roll back and Run
// returns ErrAborted. Safe to call more than once, from any goroutine.
func (s *Source) Abort() { s.abortOnce.Do(func() { close(s.abort) }) }

// Run reads the partitions this process holds until ctx is cancelled, then
// drains: it stops reading, lets the batches in flight commit, saves each
// partition's position, gives up its leases and returns nil. Lost
// connections to the events table's database are retried with backoff; an
// error is returned only if the drain was cut short (ErrAborted). Run may
// be called once.
func (s *Source) Run(ctx context.Context) error {
	if !s.ran.CompareAndSwap(false, true) {
		return errors.New("pgtable: Source.Run called twice")
	}
	if s.cfg.ownPool {
		defer s.pool.Close()
	}
	soft, hard, _, stop := sourceutil.Drain(ctx, s.abort, s.cfg.DrainTimeout, func() {
		s.log.Warn("pgtable drain timed out, aborting", "timeout", s.cfg.DrainTimeout)
	})
	defer stop()

	_, stopWork := sourceutil.Work(hard, s.disp)
	defer stopWork()
	released := make(chan struct{}) // the drain is over: give up the leases
	var bg sync.WaitGroup
	bg.Go(func() { s.holdLeases(soft, released) })
	bg.Go(func() { s.listen(soft) })
	bg.Go(func() { s.every(soft, s.cfg.CheckpointEvery, s.saveWatermarks) })
	if s.cfg.LagEvery > 0 {
		bg.Go(func() {
			s.every(soft, s.cfg.LagEvery, func(ctx context.Context) error {
				if _, err := s.MeasureLag(ctx); err != nil {
					s.log.Debug("pgtable lag not measured", "error", err) // Lag().Err says so too
				}
				return s.checkHorizon(ctx)
			})
		})
	}
	if err := s.record(ctx); err != nil {
		s.log.Warn("pgtable: the source's table not recorded in the schema; repairs and rebuilds need the mapping flags", "error", err)
	}
	s.log.Info("pgtable source starting", "table", s.cfg.table, "partitions", s.cfg.Partitions)
	<-soft.Done()

	if err := s.releaseParts(hard, s.stopParts(nil)); err != nil && hard.Err() == nil {
		s.log.Warn("pgtable final checkpoints not saved", "error", err)
	}
	aborted := hard.Err() != nil
	close(released)
	bg.Wait()
	stop() // hard too
	stopWork()
	if aborted {
		return ErrAborted
	}
	s.log.Info("pgtable source stopped")
	return nil
}

// every calls fn every d until ctx is done, logging its errors.
func (s *Source) every(ctx context.Context, d time.Duration, fn func(context.Context) error) {
	sourceutil.Every(ctx, d, false, func() {
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("pgtable background step failed", "error", err)
		}
	})
}

// saveWatermarks stores the position of every held partition that moved
// past what is known to be stored (batches that committed out of order
// leave the last one written below).
func (s *Source) saveWatermarks(ctx context.Context) error {
	s.mu.Lock()
	parts := make([]*part, 0, len(s.parts))
	for _, p := range s.parts {
		parts = append(parts, p)
	}
	s.mu.Unlock()
	return s.saveParts(ctx, parts)
}

// releaseParts lets the deliveries in flight commit and saves the
// positions of parts, whose readers stopped: what a process does before it
// gives their leases up.
func (s *Source) releaseParts(ctx context.Context, parts []*part) error {
	if len(parts) == 0 || ctx.Err() != nil {
		return ctx.Err()
	}
	if err := s.disp.Flush(ctx); err != nil {
		return err
	}
	return s.saveParts(ctx, parts)
}

func (s *Source) saveParts(ctx context.Context, parts []*part) error {
	var errs []error
	for _, p := range parts {
		errs = append(errs, s.savePart(ctx, p))
	}
	return errors.Join(errs...)
}

func (s *Source) savePart(ctx context.Context, p *part) error {
	wm, ok := p.tracker.Watermark()
	s.mu.Lock()
	skip := !ok || (p.hasSaved && !p.saved.less(wm))
	s.mu.Unlock()
	if skip {
		return nil
	}
	if err := s.cfg.Processor.SaveCheckpoint(ctx, p.name, wm.encode()); err != nil {
		return fmt.Errorf("pgtable: %w", err)
	}
	s.mu.Lock()
	if !p.hasSaved || p.saved.less(wm) {
		p.saved, p.hasSaved = wm, true
	}
	s.mu.Unlock()
	return nil
}

// startPart starts reading partition k, whose lease this process took.
func (s *Source) startPart(ctx context.Context, k int) {
	ctx, cancel := context.WithCancel(ctx)
	p := &part{k: k, name: s.checkpointName(k), tracker: source.NewTracker[pos](), wake: make(chan struct{}, 1),
		cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	s.parts[k] = p
	s.mu.Unlock()
	s.stats.leases.Add(1)
	go s.readPart(ctx, p)
}

// stopParts stops the readers of the partitions in ks (all when ks is nil),
// waits for them and returns them; their deliveries in flight still commit.
func (s *Source) stopParts(ks []int) []*part {
	s.mu.Lock()
	var stop []*part
	for k, p := range s.parts {
		if ks == nil || containsInt(ks, k) {
			stop = append(stop, p)
			delete(s.parts, k)
		}
	}
	s.mu.Unlock()
	for _, p := range stop {
		p.cancel()
	}
	for _, p := range stop {
		<-p.done
		s.stats.released.Add(1)
	}
	return stop
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// held returns how many partitions this process holds.
func (s *Source) held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.parts)
}

// wakeAll wakes every reader.
func (s *Source) wakeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.parts {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// readPart reads partition p from its checkpoint until ctx is done.
func (s *Source) readPart(ctx context.Context, p *part) {
	defer close(p.done)
	backoff := retry.Policy{Initial: 50 * time.Millisecond, Max: 2 * time.Second, MaxElapsed: -1}.Start()
	var at pos
	for {
		var err error
		if at, err = s.startAt(ctx, p); err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		wait, _ := backoff.Next()
		s.log.Warn("pgtable partition not started", "partition", p.k, "error", err, "retry_in", wait)
		_ = retry.Sleep(ctx, wait)
	}
	backoff.Reset()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var rows []row
	var horizon time.Duration // the wait for rows behind the snapshot horizon
	for ctx.Err() == nil {
		var err error
		rows, err = s.cfg.read(ctx, s.pool, p.k, at, s.cfg.ReadBatch, rows[:0])
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait, _ := backoff.Next()
			s.log.Warn("pgtable read failed, retrying", "partition", p.k, "error", err, "retry_in", wait)
			_ = retry.Sleep(ctx, wait)
			continue
		}
		backoff.Reset()
		for i := range rows {
			r := &rows[i]
			d := &source.Delivery{Event: r.ev, Ticket: p.tracker.Track(r.pos), Handle: p}
			if err := s.disp.Dispatch(ctx, d); err != nil {
				return
			}
			at = r.pos
		}
		s.stats.read.Add(int64(len(rows)))
		if len(rows) == s.cfg.ReadBatch {
			continue
		}
		// Rows committed after a transaction still running stay out of
		// sight until it ends, which no notification tells: look again
		// soon, then less and less often, up to PollInterval.
		wait := s.cfg.PollInterval
		if pending, err := s.cfg.pending(ctx, s.pool, p.k, at); err == nil && pending {
			horizon = min(max(2*horizon, time.Millisecond), s.cfg.PollInterval)
			wait = horizon
		} else {
			horizon = 0
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case <-p.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// startAt returns where partition p's reading starts: its checkpoint; the
// end of the table with FromEnd (saved at once); its start otherwise.
func (s *Source) startAt(ctx context.Context, p *part) (pos, error) {
	raw, ok, err := s.cfg.Processor.LoadCheckpoint(ctx, p.name)
	if err != nil {
		return pos{}, err
	}
	if ok {
		at, err := decodePos(raw)
		if err != nil {
			return pos{}, fmt.Errorf("pgtable: checkpoint %s: %w", p.name, err)
		}
		p.tracker.Reset(at, true)
		s.mu.Lock()
		p.saved, p.hasSaved = at, true
		s.mu.Unlock()
		return at, nil
	}
	if !s.cfg.FromEnd {
		return pos{}, nil
	}
	at, ok, err := s.cfg.end(ctx, s.pool, p.k)
	if err != nil || !ok {
		return pos{}, err
	}
	if err := s.cfg.Processor.SaveCheckpoint(ctx, p.name, at.encode()); err != nil {
		return pos{}, err
	}
	p.tracker.Reset(at, true)
	return at, nil
}

// close closes the pool the source made, for a Source that never ran.
func (s *Source) close() {
	if s.cfg.ownPool && !s.ran.Load() {
		s.pool.Close()
	}
}

// Stats are a Source's counters.
type Stats struct {
	// Read counts the rows read (again after a handover or a restart:
	// the gate absorbs those).
	Read int64
	// Batches counts the committed batches.
	Batches int64
	// Held is how many partitions this process holds now; Taken and
	// GivenUp count the leases it took and gave up (or lost).
	Held           int
	Taken, GivenUp int64
	// Reconnects counts the lease connections made again.
	Reconnects int64
	// Dispatch are the workers' figures (package source).
	Dispatch source.Stats
}

// Stats returns the source's counters.
func (s *Source) Stats() Stats {
	return Stats{Read: s.stats.read.Load(), Batches: s.stats.batches.Load(), Held: s.held(), Taken: s.stats.leases.Load(),
		GivenUp: s.stats.released.Load(), Reconnects: s.stats.reconnects.Load(), Dispatch: s.disp.Stats()}
}
