package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/internal/sourceutil"
)

// This file holds the Source, its counters and its run loop; group.go holds
// the group's callbacks (assignment, revocation), checkpoint.go the
// partitions' positions, lag.go the lag.

// ErrAborted is returned by Run when its drain was cut short by Abort or
// Config.DrainTimeout: the batches in flight were rolled back, and their
// records are consumed again by whoever owns their partitions next.
var ErrAborted = fmt.Errorf("kafka: drain aborted: %w", source.ErrAborted)

// rpos is a record's place in its partition, with its timestamp (for the
// lag in seconds).
type rpos struct {
	off int64
	at  time.Time
}

// partition is a partition this process owns: its records in flight and the
// highest offset known stored.
type partition struct {
	Partition
	cpName  string
	tracker *source.Tracker[rpos]
	saved   atomic.Int64 // -1: none
}

func (p *partition) advance(off int64) {
	for {
		cur := p.saved.Load()
		if off <= cur || p.saved.CompareAndSwap(cur, off) {
			return
		}
	}
}

// Source feeds a projection.Processor from Kafka topics as one member of a
// consumer group. See the package documentation.
type Source struct {
	cfg  *config
	log  *slog.Logger
	disp *source.Dispatcher
	ran  atomic.Bool
	hard context.Context // Run's: done when the drain is cut short

	abort     chan struct{}
	abortOnce sync.Once

	mu    sync.Mutex
	parts map[Partition]*partition

	cpMu    sync.Mutex
	batchCP map[*source.Delivery]map[*partition]int64 // what a batch's transaction stores, by its first delivery

	lagMu sync.Mutex
	lag   Lag

	acker acker
	stats struct {
		received, skipped, rejected, acked, truncated atomic.Int64
		assigned, revoked, lost                       atomic.Int64
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
		cfg: c, log: c.Logger,
		abort:   make(chan struct{}),
		parts:   map[Partition]*partition{},
		batchCP: map[*source.Delivery]map[*partition]int64{},
		lag:     Lag{Source: c.Name, Group: c.Group, Partitions: []PartitionLag{}, Projections: []ProjectionLag{}},
	}
	s.acker.s = s
	dc := c.dispCfg
	dc.Checkpoints = s.checkpoints
	dc.AfterCommit = s.afterCommit
	s.disp, err = source.NewDispatcher(&dc)
	if err != nil {
		return nil, fmt.Errorf("kafka: %w", err)
	}
	return s, nil
}

// Stats are a Source's cumulative counters, for metrics.
type Stats struct {
	// Received counts records received, redeliveries after a rebalance
	// included.
	Received int64
	// Skipped counts tombstones (records without a value): passed, not
	// processed.
	Skipped int64
	// Rejected counts records recorded as rejected, by the mapping or by
	// the processor's validation.
	Rejected int64
	// Acked counts records settled after their batch committed.
	Acked int64
	// Batches counts committed batches.
	Batches int64
	// Assigned, Revoked and Lost count partitions assigned to this
	// process, revoked from it (handed over after a drain) and lost (the
	// group session ended without a handover), since it started.
	Assigned, Revoked, Lost int64
	// Truncated counts records a partition's retention (or DeleteRecords)
	// removed before the source consumed them: found at assignment, when
	// the partition's log starts after its checkpoint.
	Truncated int64
	// Owned lists the partitions this process owns now.
	Owned []Partition
	// InFlight counts records dispatched and not yet committed.
	InFlight int
	// Dispatch are the workers' figures: batches by close reason and fill,
	// the window, the time workers waited for input.
	Dispatch source.Stats
}

// Stats returns the source's counters.
func (s *Source) Stats() Stats {
	ds := s.disp.Stats()
	st := Stats{
		Received: s.stats.received.Load(), Skipped: s.stats.skipped.Load(), Rejected: s.stats.rejected.Load(),
		Acked: s.stats.acked.Load(), Batches: ds.Committed, Truncated: s.stats.truncated.Load(),
		Assigned: s.stats.assigned.Load(), Revoked: s.stats.revoked.Load(), Lost: s.stats.lost.Load(),
		InFlight: ds.InFlight, Dispatch: ds,
	}
	for _, p := range s.owned() {
		st.Owned = append(st.Owned, p.Partition)
	}
	return st
}

// owned returns the partitions this process owns, by topic and number.
func (s *Source) owned() []*partition {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*partition, 0, len(s.parts))
	for _, p := range s.parts {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *partition) int {
		if a.Topic != b.Topic {
			return compareStrings(a.Topic, b.Topic)
		}
		return int(a.Partition.Partition - b.Partition.Partition)
	})
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Abort cuts a graceful stop short — the second signal: the batches in
// flight are rolled back and Run returns ErrAborted. It is safe to call more
// than once, from any goroutine.
func (s *Source) Abort() { s.abortOnce.Do(func() { close(s.abort) }) }

// Run joins the group and consumes its partitions until ctx is cancelled.
// Then it drains: it stops fetching, lets every batch in flight commit,
// saves the positions and leaves the group, so that the partitions move to
// the other members at once; it returns nil. Abort or Config.DrainTimeout
// cut the drain short (ErrAborted). Run may be called once.
func (s *Source) Run(ctx context.Context) error {
	if !s.ran.CompareAndSwap(false, true) {
		return errors.New("kafka: Source.Run called twice")
	}
	soft, hard, cancelSoft, stop := sourceutil.Drain(ctx, s.abort, s.cfg.DrainTimeout, func() {
		s.log.Warn("kafka drain timed out, aborting", "name", s.cfg.Name, "timeout", s.cfg.DrainTimeout)
	})
	defer stop()
	s.hard = hard

	_, stopWork := sourceutil.Work(hard, s.disp)
	defer stopWork()

	if err := s.record(soft); err != nil {
		s.log.Warn("kafka mapping not recorded (a rebuild will need the mapping flags)", "name", s.cfg.Name, "error", err)
	}
	cl, err := kgo.NewClient(s.groupOptions()...)
	if err != nil {
		stopWork()
		return fmt.Errorf("kafka: client: %w", err)
	}
	var bg sync.WaitGroup
	bg.Go(func() {
		sourceutil.Every(soft, s.cfg.CheckpointEvery, false, func() {
			if err := s.saveWatermarks(soft, s.owned()); err != nil && soft.Err() == nil {
				s.log.Warn("kafka checkpoint not saved", "name", s.cfg.Name, "error", err)
			}
		})
	})
	if s.cfg.LagEvery > 0 {
		adm := kadm.NewClient(cl)
		bg.Go(func() {
			sourceutil.Every(soft, s.cfg.LagEvery, false, func() { _, _ = s.measure(soft, adm) })
		})
	}
	s.log.Info("kafka source starting", "name", s.cfg.Name, "group", s.cfg.Group, "topics", s.cfg.Topics)

	pollErr := s.poll(soft, hard, cl)
	cancelSoft()
	bg.Wait()
	// Drain: settle what was dispatched, save the positions, and leave the
	// group (the revocation that Close runs finds nothing left to drain).
	if err := s.disp.Flush(hard); err != nil {
		s.log.Debug("kafka flush cut short", "name", s.cfg.Name, "error", err)
	} else if err := s.saveWatermarks(hard, s.owned()); err != nil {
		s.log.Warn("kafka final checkpoint not saved", "name", s.cfg.Name, "error", err)
	}
	cl.Close()
	stopWork()
	if hard.Err() != nil {
		return ErrAborted
	}
	if pollErr != nil {
		return pollErr
	}
	s.log.Info("kafka source stopped", "name", s.cfg.Name)
	return nil
}

// groupOptions are the options of the group's client.
func (s *Source) groupOptions() []kgo.Opt {
	reset := kgo.NewOffset().AtStart()
	if s.cfg.FromEnd {
		reset = kgo.NewOffset().AtEnd()
	}
	opts := append(s.cfg.clientOptions(),
		kgo.ConsumerGroup(s.cfg.Group),
		kgo.ConsumeTopics(s.cfg.Topics...),
		kgo.ConsumeResetOffset(reset),
		// Positions live in Postgres, in the batches' transactions.
		kgo.DisableAutoCommit(),
		// Rebalance callbacks run between polls, never while the poll loop
		// holds records it has not dispatched.
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(s.assigned),
		kgo.AdjustFetchOffsetsFn(s.adjust),
		kgo.OnPartitionsRevoked(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) { s.release(m, false) }),
		kgo.OnPartitionsLost(func(ctx context.Context, _ *kgo.Client, m map[string][]int32) { s.release(m, true) }),
	)
	return append(opts, s.cfg.ClientOptions...)
}

// poll fetches records and dispatches them until soft is done.
func (s *Source) poll(soft, hard context.Context, cl *kgo.Client) error {
	for soft.Err() == nil {
		fs := cl.PollRecords(soft, s.cfg.BatchSize)
		if fs.IsClientClosed() {
			cl.AllowRebalance()
			return nil
		}
		fs.EachError(func(topic string, part int32, err error) {
			if soft.Err() == nil && !errors.Is(err, context.Canceled) {
				s.log.Warn("kafka fetch error", "name", s.cfg.Name, "topic", topic, "partition", part, "error", err)
			}
		})
		var err error
		fs.EachRecord(func(r *kgo.Record) {
			if err == nil {
				// Dispatch until hard: what was fetched is processed, even
				// while draining.
				err = s.dispatch(hard, r)
			}
		})
		cl.AllowRebalance()
		if err != nil {
			if hard.Err() != nil || errors.Is(err, source.ErrStopped) {
				return nil
			}
			return err
		}
	}
	return nil
}

func (s *Source) dispatch(ctx context.Context, r *kgo.Record) error {
	s.mu.Lock()
	p := s.parts[Partition{r.Topic, r.Partition}]
	s.mu.Unlock()
	if p == nil {
		// Not (or no longer) ours: its owner reads it from its checkpoint.
		s.log.Debug("kafka record of a partition not owned", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
		return nil
	}
	s.stats.received.Add(1)
	pos := rpos{off: r.Offset, at: r.Timestamp}
	if r.Value == nil {
		// A tombstone (compaction's delete marker) is no event.
		s.stats.skipped.Add(1)
		p.tracker.Pass(pos)
		return nil
	}
	e, err := s.cfg.mapping.event(r)
	d := &source.Delivery{Event: e, Acker: &s.acker, Ticket: p.tracker.Track(pos), Handle: p}
	if err != nil {
		d.Reject = err
		if e.Aggregate == "" {
			d.Key = p.cpName
		}
	}
	return s.disp.Dispatch(ctx, d)
}

// acker marks committed records done in their partitions' trackers. Kafka
// cannot redeliver on demand: failed batches are retried in place.
type acker struct{ s *Source }

func (a *acker) Ack(ds []*source.Delivery) {
	var p *partition
	var tickets []source.Ticket
	for _, d := range ds {
		if q := d.Handle.(*partition); q != p {
			if p != nil {
				p.tracker.Done(tickets...)
			}
			p, tickets = q, tickets[:0]
		}
		tickets = append(tickets, d.Ticket)
	}
	if p != nil {
		p.tracker.Done(tickets...)
	}
	a.s.stats.acked.Add(int64(len(ds)))
}

func (a *acker) Nack([]*source.Delivery, error) bool { return false }

// afterCommit notes what a committed batch stored and reports it.
func (s *Source) afterCommit(batch []*source.Delivery, results []projection.Result) {
	s.cpMu.Lock()
	offsets := s.batchCP[batch[0]]
	delete(s.batchCP, batch[0])
	s.cpMu.Unlock()
	for p, off := range offsets {
		p.advance(off)
	}
	c := Commit{Deliveries: len(batch), Outcomes: map[projection.Outcome]int{}, Offsets: make(map[Partition]int64, len(offsets))}
	for _, d := range batch {
		if d.Reject != nil {
			c.Rejected++
		}
	}
	for _, r := range results {
		c.Outcomes[r.Outcome]++
	}
	c.Rejected += c.Outcomes[projection.Rejected]
	s.stats.rejected.Add(int64(c.Rejected))
	for p, off := range offsets {
		c.Offsets[p.Partition] = off
	}
	if s.cfg.OnCommit != nil {
		s.cfg.OnCommit(c)
	}
}
