package esdb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

const (
	// repairPage is how many events gap repair reads per request when it
	// scans a stream (version-from-metadata mapping).
	repairPage = 500
	// repairMax caps the versions gap repair reads for one aggregate in a
	// round; the next round goes on from there.
	repairMax = 10000
)

// repairLoop runs a gap-repair round every RepairEvery until ctx is done.
func (s *Source) repairLoop(ctx context.Context) {
	s.every(ctx, s.cfg.RepairEvery, false, slog.LevelWarn, "esdb gap repair round failed", s.repairRound)
}

// gap is what one aggregate waits for, over the processor's projections.
type gap struct {
	agg      string
	from, to int64
	waits    []projection.WaitingEntry
}

// RepairOptions restricts Source.RepairNow. A nil *RepairOptions is valid:
// every aggregate waiting in the processor's projections, up to
// Config.RepairLimit of them.
type RepairOptions struct {
	// Projection, if set, repairs only the aggregates waiting in this
	// projection, one of the processor's. The events read are processed
	// for every projection all the same.
	Projection string
	// Generation, if positive, repairs the aggregates waiting in that
	// generation of the projections instead of their live one (see
	// projection.ListOptions.Generation). The events read are processed
	// for every generation the processor feeds: a generation nothing feeds
	// any more is not repaired by them.
	Generation int
	// Aggregate, if set, repairs only this aggregate.
	Aggregate string
	// OlderThan, if positive, repairs only the aggregates whose oldest
	// parked event has waited at least this long. Default 0: every waiting
	// aggregate — Config.RepairAfter does not apply.
	OlderThan time.Duration
	// Limit caps the aggregates repaired, the longest waiting first.
	// Default Config.RepairLimit.
	Limit int
	// DryRun reads the streams and feeds what it finds through the gate in
	// transactions that are rolled back (projection.Batch.DryRun): the
	// Repairs say what a repair would do, and nothing changes — no event
	// applied, no finding recorded in the operator log.
	DryRun bool
}

// RepairNow runs gap repair once, now, the way Run's periodic rounds do:
// for each waiting aggregate that opts selects, it reads the missing
// versions from the aggregate's stream, processes what it finds, and
// records the versions a projection waits for that the stream does not have
// in the operator log ('gap-missing-at-source', once per gap). Unlike the
// rounds it also looks again at gaps already recorded as missing. It
// returns one Repair per aggregate, the longest waiting first, and calls
// Config.OnRepair for each.
//
// RepairNow needs no Run: it uses a client of its own, so a Source made
// with New just for it (the CLI's 'parked repair' does that) works. It may
// also be called while Run runs. It stops at the first error; the Repairs
// so far are returned with it, the last one carrying the error.
func (s *Source) RepairNow(ctx context.Context, opts *RepairOptions) ([]Repair, error) {
	if opts == nil {
		opts = &RepairOptions{}
	}
	if opts.Limit < 0 || opts.OlderThan < 0 {
		return nil, errors.New("esdb: negative RepairOptions.Limit or OlderThan")
	}
	proc := s.cfg.Processor
	projections := proc.Projections()
	if opts.Projection != "" {
		if !slices.Contains(projections, opts.Projection) {
			return nil, fmt.Errorf("esdb: repair: %w: %q", projection.ErrUnknownProjection, opts.Projection)
		}
		projections = []string{opts.Projection}
	}
	limit := cmp.Or(opts.Limit, s.cfg.RepairLimit)
	// An aggregate has a row per projection it waits in.
	n := max(len(projections), 1)
	waiting, err := proc.Waiting(ctx, projection.ListOptions{
		Projection: opts.Projection, Generation: opts.Generation, Aggregate: opts.Aggregate, OlderThan: opts.OlderThan,
		Limit: min(limit, 1<<20/n) * n,
	})
	if err != nil {
		return nil, fmt.Errorf("esdb: repair: %w", err)
	}
	reps, _, err := s.repairGaps(ctx, s.gaps(waiting, limit, nil), opts.DryRun)
	return reps, err
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
	waiting, err := proc.Waiting(ctx, projection.ListOptions{OlderThan: s.cfg.RepairAfter, Limit: limit})
	if err != nil {
		return err
	}
	stillMissing := map[string]bool{}
	gaps := s.gaps(waiting, s.cfg.RepairLimit, func(w projection.WaitingEntry) bool {
		k := missingKey(w)
		if s.knownMissing[k] {
			stillMissing[k] = true
			return true
		}
		return false
	})
	if len(waiting) < limit {
		// The listing is complete: forget gaps that were resolved.
		for k := range s.knownMissing {
			if !stillMissing[k] {
				delete(s.knownMissing, k)
			}
		}
	}
	_, missing, err := s.repairGaps(ctx, gaps, false)
	for _, w := range missing {
		s.knownMissing[missingKey(w)] = true
	}
	return err
}

// gaps groups waiting rows of the processor's projections by aggregate, in
// listing order, for at most limit aggregates; rows for which skip returns
// true are left out.
func (s *Source) gaps(waiting []projection.WaitingEntry, limit int, skip func(projection.WaitingEntry) bool) []*gap {
	mine := map[string]bool{}
	for _, name := range s.cfg.Processor.Projections() {
		mine[name] = true
	}
	var gaps []*gap
	byAgg := map[string]*gap{}
	for _, w := range waiting {
		if !mine[w.Projection] || (skip != nil && skip(w)) {
			continue
		}
		g := byAgg[w.Aggregate]
		if g == nil && len(gaps) == limit {
			continue
		}
		from, to := w.MissingFrom, w.MissingTo
		if g == nil {
			g = &gap{agg: w.Aggregate, from: from, to: to}
			byAgg[w.Aggregate] = g
			gaps = append(gaps, g)
		}
		g.from, g.to = min(g.from, from), max(g.to, to)
		g.waits = append(g.waits, w)
	}
	return gaps
}

// repairGaps repairs gaps one after the other with a client of its own,
// calling OnRepair for each, until one fails. missing lists the waits it
// recorded as missing at the source.
func (s *Source) repairGaps(ctx context.Context, gaps []*gap, dryRun bool) (reps []Repair, missing []projection.WaitingEntry, err error) {
	reps = make([]Repair, 0, len(gaps))
	if len(gaps) == 0 {
		return reps, nil, nil
	}
	// A client of its own: a failed call must not disturb the subscription's.
	client, err := s.cfg.newClient()
	if err != nil {
		return reps, nil, err
	}
	defer client.Close()
	for _, g := range gaps {
		r, m := s.repair(ctx, client, g, dryRun)
		missing = append(missing, m...)
		reps = append(reps, r)
		if s.cfg.OnRepair != nil {
			s.cfg.OnRepair(r)
		}
		if r.Err != nil {
			return reps, missing, fmt.Errorf("aggregate %s: %w", g.agg, r.Err)
		}
	}
	return reps, missing, nil
}

// repair reads one aggregate's missing versions, processes what it finds and
// records what it does not; missing lists the waits recorded.
func (s *Source) repair(ctx context.Context, client *esdbc.Client, g *gap, dryRun bool) (r Repair, missing []projection.WaitingEntry) {
	g.to = min(g.to, g.from+repairMax-1)
	r = Repair{Aggregate: g.agg, From: g.from, To: g.to}
	stream := s.cfg.Mapping.Stream(g.agg)
	var found []foundEvent
	var err error
	if s.cfg.Mapping.VersionField == "" {
		found, r.Reason, err = s.readRevisions(ctx, client, stream, g.from, g.to)
	} else {
		found, r.Reason, err = s.readScan(ctx, client, stream, g.from, g.to)
	}
	if err != nil {
		r.Err = err
		return r, nil
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
	r.Found = len(have)
	for v := g.from; v <= g.to; v++ {
		if have[v] {
			continue
		}
		end := v
		for end < g.to && !have[end+1] {
			end++
		}
		r.Absent = append(r.Absent, VersionRange{From: v, To: end})
		v = end
	}
	r.Outcomes = map[string]int{}
	refused := len(rejects)
	if refused > 0 {
		r.Outcomes[projection.Rejected.String()] += len(rejects)
	}
	for len(events) > 0 || len(rejects) > 0 {
		n := min(len(events), s.cfg.BatchSize)
		b := projection.Batch{Events: events[:n], Rejects: rejects, Source: s.cfg.Name, DryRun: dryRun}
		res, err := s.cfg.Processor.Process(ctx, b)
		if err != nil {
			r.Err = err
			return r, nil
		}
		for _, x := range res {
			r.Outcomes[x.Outcome.String()]++
		}
		r.Fed += n
		events, rejects = events[n:], nil
	}
	if !dryRun {
		s.stats.repaired.Add(int64(r.Fed))
	}
	// What each projection waits for first and the stream does not have.
	for _, w := range g.waits {
		from, to := w.MissingFrom, w.MissingTo
		if have[from] || from > g.to {
			continue
		}
		to = min(to, g.to)
		end := from
		for end < to && !have[end+1] {
			end++
		}
		if dryRun { // reported, not recorded
			r.Missing = true
			continue
		}
		reason := r.Reason
		if reason == "" {
			reason = fmt.Sprintf("versions %d-%d are not in stream %s (truncated, deleted or never written)", from, end, stream)
		}
		inserted, err := s.recordMissing(ctx, w.Projection, w.Generation, g.agg, from, end, reason)
		if err != nil {
			r.Err = err
			return r, missing
		}
		r.Missing = true
		missing = append(missing, w)
		if inserted {
			s.stats.gapsMissing.Add(1)
			s.log.Warn("esdb gap missing at source; an operator must declare it", "name", s.cfg.Name,
				"projection", w.Projection, "generation", w.Generation, "aggregate", g.agg, "from", from, "to", end, "reason", reason)
		}
	}
	if (r.Fed > 0 || refused > 0) && !dryRun {
		msg := "esdb gap repaired"
		if r.Outcomes[projection.Applied.String()] == 0 {
			msg = "esdb gap repair applied nothing"
		}
		s.log.Info(msg, "name", s.cfg.Name, "aggregate", g.agg, "from", g.from, "to", g.to, "fed", r.Fed,
			"outcomes", fmt.Sprint(r.Outcomes))
	}
	return r, missing
}

// missingKey identifies a projection's gap for knownMissing.
func missingKey(w projection.WaitingEntry) string {
	return fmt.Sprintf("%s\x00%d\x00%s\x00%d", w.Projection, w.Generation, w.Aggregate, w.Current)
}

// recordMissing writes the operator-log row of a gap missing at the source,
// unless it is there already.
func (s *Source) recordMissing(ctx context.Context, proj string, gen int, agg string, from, to int64, reason string) (inserted bool, err error) {
	inserted, err = s.cfg.Processor.LogAction(ctx, projection.Action{Action: "gap-missing-at-source",
		Projection: proj, Generation: gen, Aggregate: agg, From: &from, To: &to, Reason: reason, Once: true})
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
		e, err := s.cfg.mapRead(ev.Event)
		if v := e.Version; err == nil && (v < from || v > to) {
			continue
		}
		found = append(found, foundEvent{ev: e, err: err})
	}
}

// readScan reads a stream from its first event, for a mapping whose versions
// come from metadata, and returns the first occurrence in stream order of
// each version from…to. Stream order need not be version order (versions
// written 1,3,2, or one re-sent later under a new event id), so no position
// in the stream tells that a version is absent: the scan stops once every
// version was found, and otherwise reads the whole stream.
func (s *Source) readScan(ctx context.Context, client *esdbc.Client, stream string, from, to int64) (found []foundEvent, gone string, err error) {
	var start esdbc.StreamPosition = esdbc.Start{}
	have := map[int64]bool{}
	want := int(to - from + 1)
	for {
		rs, err := client.ReadStream(ctx, stream, esdbc.ReadStreamOptions{From: start}, repairPage)
		if err != nil {
			return nil, "", fmt.Errorf("esdb: read %s: %w", stream, err)
		}
		n, last := 0, uint64(0)
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
			e, err := s.cfg.mapRead(ev.Event)
			if err != nil || e.Version < from || e.Version > to || have[e.Version] {
				continue // no version to place it by, not wanted, or a later copy
			}
			have[e.Version] = true
			found = append(found, foundEvent{ev: e})
		}
		rs.Close()
		if len(have) == want || n < repairPage {
			return found, "", nil
		}
		start = esdbc.Revision(last + 1)
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
