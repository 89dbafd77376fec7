package esdb

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/internal/sourceutil"
)

// This file holds committed batches and the catch-up checkpoint: saving the
// watermark with a batch or on a clock, loading it, and its encoding.

// checkpoints returns the position a batch's transaction stores
// (source.Config.Checkpoints): the low watermark with the batch's own
// deliveries counted as committed, unless the saved checkpoint covers it.
func (s *Source) checkpoints(batch []*source.Delivery) []projection.Checkpoint {
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
	s.cpMu.Lock()
	s.batchCP[batch[0]] = p
	s.cpMu.Unlock()
	return []projection.Checkpoint{{Name: s.cfg.Name, Position: encodePosition(p)}}
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

// noteApplied records, per projection, the newest event of a committed
// batch it applied or found applied.
func (s *Source) noteApplied(batch []*source.Delivery, results []projection.Result) {
	type newest struct {
		pos esdbc.Position
		at  time.Time
		ok  bool
	}
	names := s.cfg.Processor.Projections()
	top := make([]newest, len(names))
	for d, r := range sourceutil.Processed(batch, results) {
		ev, _ := d.Handle.(*esdbc.ResolvedEvent)
		if ev == nil {
			continue
		}
		rec := ev.Event
		if rec == nil {
			rec = ev.OriginalEvent()
		}
		for j, o := range r.Projections {
			if (o == projection.Applied || o == projection.Duplicate) && j < len(top) && (!top[j].ok || less(top[j].pos, rec.Position)) {
				top[j] = newest{rec.Position, rec.CreatedDate, true}
			}
		}
	}
	s.lagMu.Lock()
	defer s.lagMu.Unlock()
	for j, n := range top {
		if !n.ok {
			continue
		}
		if cur := s.applied[names[j]]; cur == nil || less(esdbc.Position{Commit: cur.Commit, Prepare: cur.Prepare}, n.pos) {
			s.applied[names[j]] = allPoint(n.pos, n.at)
		}
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
	sourceutil.Every(ctx, d, now, func() {
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			s.log.Log(ctx, level, msg, "name", s.cfg.Name, "error", err)
		}
	})
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

func less(a, b esdbc.Position) bool {
	return a.Commit < b.Commit || (a.Commit == b.Commit && a.Prepare < b.Prepare)
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
