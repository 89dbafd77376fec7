package esdb

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/buffer"
	"github.com/inorder/inorder/projection"
)

const (
	// repairPage is how many events gap repair reads per request when it
	// scans a stream's tail (version-from-metadata mapping).
	repairPage = 100
	// repairMax caps the versions gap repair reads for one aggregate in a
	// round; the next round goes on from there.
	repairMax = 10000
)

// repairLoop runs a gap-repair round every RepairEvery until ctx is done.
func (s *Source) repairLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.RepairEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.repairRound(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("inorder: esdb gap repair round failed", "name", s.cfg.Name, "error", err)
			}
		}
	}
}

// gap is what one aggregate waits for, over the processor's projections.
type gap struct {
	agg      string
	from, to int64
	waits    []buffer.Waiting
}

// repairRound repairs the aggregates whose parked events have waited longer
// than RepairAfter: it reads the missing versions from the aggregate's stream
// and processes them; versions the stream does not have are recorded in the
// operator log, once per gap, for an operator to decide (DeclareGap).
func (s *Source) repairRound(ctx context.Context) error {
	proc := s.cfg.Processor
	// Gaps known to be missing at the source wait for an operator; list
	// past them so they do not starve the others.
	limit := min(s.cfg.RepairLimit+len(s.knownMissing), 10*s.cfg.RepairLimit)
	waiting, err := proc.Buffer().Waiting(ctx, proc.Pool(), buffer.ListOptions{OlderThan: s.cfg.RepairAfter, Limit: limit})
	if err != nil {
		return err
	}
	mine := map[string]bool{}
	for _, name := range proc.Projections() {
		mine[name] = true
	}
	stillMissing := map[string]bool{}
	var gaps []*gap
	byAgg := map[string]*gap{}
	for _, w := range waiting {
		if !mine[w.Projection] {
			continue
		}
		if k := missingKey(w); s.knownMissing[k] {
			stillMissing[k] = true
			continue
		}
		if len(gaps) == s.cfg.RepairLimit && byAgg[w.Aggregate] == nil {
			continue
		}
		from, to := w.Missing()
		g := byAgg[w.Aggregate]
		if g == nil {
			g = &gap{agg: w.Aggregate, from: from, to: to}
			byAgg[w.Aggregate] = g
			gaps = append(gaps, g)
		}
		g.from, g.to = min(g.from, from), max(g.to, to)
		g.waits = append(g.waits, w)
	}
	if len(waiting) < limit {
		// The listing is complete: forget gaps that were resolved.
		for k := range s.knownMissing {
			if !stillMissing[k] {
				delete(s.knownMissing, k)
			}
		}
	}
	if len(gaps) == 0 {
		return nil
	}
	// A client of its own: a failed call must not disturb the subscription's.
	client, err := s.newClient()
	if err != nil {
		return err
	}
	defer client.Close()
	for _, g := range gaps {
		r := s.repair(ctx, client, g)
		if s.cfg.OnRepair != nil {
			s.cfg.OnRepair(r)
		}
		if r.Err != nil {
			return fmt.Errorf("aggregate %s: %w", g.agg, r.Err)
		}
	}
	return nil
}

// repair reads one aggregate's missing versions, processes what it finds and
// records what it does not.
func (s *Source) repair(ctx context.Context, client *esdbc.Client, g *gap) Repair {
	g.to = min(g.to, g.from+repairMax-1)
	r := Repair{Aggregate: g.agg, From: g.from, To: g.to}
	stream := s.cfg.Mapping.Stream(g.agg)
	var found []foundEvent
	var gone string // why the stream has nothing: not found, deleted
	var err error
	if s.cfg.Mapping.VersionField == "" {
		found, gone, err = s.readRevisions(ctx, client, stream, g.from, g.to)
	} else {
		found, gone, err = s.readTail(ctx, client, stream, g.from, g.to)
	}
	if err != nil {
		r.Err = err
		return r
	}
	var events []aggregate.Event
	var rejects []projection.Reject
	have := map[int64]bool{}
	for _, f := range found {
		switch {
		case errors.Is(f.err, ErrSkipped):
			continue // not for inorder: as good as missing
		case f.err != nil:
			rejects = append(rejects, projection.Reject{Event: f.ev, Err: f.err})
		default:
			events = append(events, f.ev)
		}
		have[f.ev.Version] = true
	}
	for len(events) > 0 || len(rejects) > 0 {
		n := min(len(events), s.cfg.BatchSize)
		b := projection.Batch{Events: events[:n], Rejects: rejects, Source: s.cfg.Name}
		if _, err := s.cfg.Processor.Process(ctx, b); err != nil {
			r.Err = err
			return r
		}
		r.Fed += n
		events, rejects = events[n:], nil
	}
	s.stats.repaired.Add(int64(r.Fed))
	// What each projection waits for first and the stream does not have.
	for _, w := range g.waits {
		from, to := w.Missing()
		if have[from] || from > g.to {
			continue
		}
		to = min(to, g.to)
		end := from
		for end < to && !have[end+1] {
			end++
		}
		reason := gone
		if reason == "" {
			reason = fmt.Sprintf("versions %d-%d are not in stream %s (truncated, deleted or never written)", from, end, stream)
		}
		inserted, err := s.recordMissing(ctx, w.Projection, g.agg, from, end, reason)
		if err != nil {
			r.Err = err
			return r
		}
		r.Missing = true
		s.knownMissing[missingKey(w)] = true
		if inserted {
			s.stats.gapsMissing.Add(1)
			s.log.Warn("inorder: esdb gap missing at source; an operator must declare it", "name", s.cfg.Name,
				"projection", w.Projection, "aggregate", g.agg, "from", from, "to", end, "reason", reason)
		}
	}
	if r.Fed > 0 {
		s.log.Info("inorder: esdb gap repaired", "name", s.cfg.Name, "aggregate", g.agg, "from", g.from, "to", g.to, "fed", r.Fed)
	}
	return r
}

// missingKey identifies a projection's gap for knownMissing.
func missingKey(w buffer.Waiting) string {
	return fmt.Sprintf("%s\x00%s\x00%d", w.Projection, w.Aggregate, w.Current)
}

// recordMissing writes the operator-log row of a gap missing at the source,
// unless it is there already. An advisory lock on the gap keeps two
// processes from writing it twice.
func (s *Source) recordMissing(ctx context.Context, proj, agg string, from, to int64, reason string) (inserted bool, err error) {
	err = pgx.BeginFunc(ctx, s.cfg.Processor.Pool(), func(tx pgx.Tx) error {
		key := sha256.Sum256(fmt.Appendf(nil, "inorder.gap-missing\x00%s\x00%s\x00%s\x00%d", s.cfg.Processor.Schema(), proj, agg, from))
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(binary.BigEndian.Uint64(key[:8]))); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, s.sql.gapMissing, proj, agg, from, to, reason)
		inserted = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("esdb: record missing gap: %w", err)
	}
	return inserted, nil
}

// foundEvent is an event read by gap repair, mapped.
type foundEvent struct {
	ev  aggregate.Event
	err error // ErrSkipped or a validation error, as Mapping.Map returns
}

// readRevisions reads versions from…to (revisions from-1…to-1) of a stream.
// gone is set when the stream does not exist or is deleted.
func (s *Source) readRevisions(ctx context.Context, client *esdbc.Client, stream string, from, to int64) (found []foundEvent, gone string, err error) {
	rs, err := client.ReadStream(ctx, stream, esdbc.ReadStreamOptions{From: esdbc.Revision(uint64(from - 1))}, uint64(to-from+1))
	if err != nil {
		return nil, "", fmt.Errorf("esdb: read %s: %w", stream, err)
	}
	defer rs.Close()
	for {
		ev, err := safeRead(rs)
		if errors.Is(err, io.EOF) {
			return found, "", nil
		}
		if gone := goneReason(err, stream); gone != "" {
			return nil, gone, nil
		}
		if err != nil {
			return nil, "", fmt.Errorf("esdb: read %s: %w", stream, err)
		}
		e, err := s.cfg.mapEvent(ev.Event)
		if v := e.Version; err == nil && (v < from || v > to) {
			continue
		}
		found = append(found, foundEvent{ev: e, err: err})
	}
}

// readTail reads a stream backwards from its end until it passes version
// from, for a mapping whose versions come from metadata, and returns the
// events with versions from…to.
func (s *Source) readTail(ctx context.Context, client *esdbc.Client, stream string, from, to int64) (found []foundEvent, gone string, err error) {
	var start esdbc.StreamPosition = esdbc.End{}
	for {
		rs, err := client.ReadStream(ctx, stream, esdbc.ReadStreamOptions{From: start, Direction: esdbc.Backwards}, repairPage)
		if err != nil {
			return nil, "", fmt.Errorf("esdb: read %s: %w", stream, err)
		}
		n, past, last := 0, false, uint64(0)
		for {
			ev, err := safeRead(rs)
			if errors.Is(err, io.EOF) {
				break
			}
			if gone := goneReason(err, stream); gone != "" {
				rs.Close()
				return nil, gone, nil
			}
			if err != nil {
				rs.Close()
				return nil, "", fmt.Errorf("esdb: read %s: %w", stream, err)
			}
			n++
			last = ev.OriginalEvent().EventNumber
			e, err := s.cfg.mapEvent(ev.Event)
			if err != nil {
				continue // no version to place it by
			}
			if e.Version < from {
				past = true
				break
			}
			if e.Version <= to {
				found = append(found, foundEvent{ev: e})
			}
		}
		rs.Close()
		if past || n < repairPage || last == 0 {
			return found, "", nil
		}
		start = esdbc.Revision(last - 1)
	}
}

// goneReason explains a read error that means the stream has nothing to give:
// it does not exist, or it is deleted.
func goneReason(err error, stream string) string {
	switch {
	case err == nil:
		return ""
	case hasCode(err, esdbc.ErrorCodeResourceNotFound):
		return fmt.Sprintf("stream %s not found (never written, or deleted)", stream)
	case hasCode(err, esdbc.ErrorCodeStreamDeleted):
		return fmt.Sprintf("stream %s is deleted", stream)
	}
	return ""
}

// safeRead is ReadStream.Recv, with the client's panic on an unexpected
// message turned into an error.
func safeRead(rs *esdbc.ReadStream) (ev *esdbc.ResolvedEvent, err error) {
	defer func() {
		if r := recover(); r != nil {
			ev, err = nil, fmt.Errorf("esdb client panicked: %v", r)
		}
	}()
	return rs.Recv()
}
