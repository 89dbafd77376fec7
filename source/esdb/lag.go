package esdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"time"

	"github.com/inorder/inorder/source/internal/sourceutil"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/inorder/inorder/source"
)

const (
	// lagPage is how many events a lag measurement reads per request.
	lagPage = 256
	// lagScanMax bounds the events a measurement reads back from the head
	// of $all; past it, the events behind are estimated.
	lagScanMax = 4 * lagPage
)

// Lag is how far a Source is behind the head of what it reads. Every
// projection of the processor processes every batch in the same
// transaction, so the projections' lag is the source's; each has its own
// last applied event. See Source.Lag for how it is measured.
type Lag struct {
	// Source is Config.Name; Mode "catch-up" or "persistent".
	Source string `json:"source"`
	Mode   string `json:"mode"`
	// Known is false until a measurement succeeded: the other figures are
	// zero then.
	Known bool `json:"known"`
	// MeasuredAt is when the server was last asked.
	MeasuredAt time.Time `json:"measured_at,omitzero"`
	// Events counts events (matching the source's filter) that are not
	// committed yet: received and in flight, plus not yet received. In
	// persistent mode it is the whole group's, over all its consumers.
	Events int64 `json:"events"`
	// Estimated is set when Events is an estimate: more events are behind
	// than a measurement reads, and the rest is extrapolated from their
	// positions.
	Estimated bool `json:"estimated,omitempty"`
	// Behind is the age of the oldest event not committed yet, by its
	// creation time on the server, and 0 when Events is 0 — what a
	// readiness threshold compares (BehindSeconds in JSON).
	Behind        time.Duration `json:"-"`
	BehindSeconds float64       `json:"behind_seconds"`
	// Head is the newest event matching the filter, if any.
	Head *Point `json:"head,omitempty"`
	// Err is the error of the last measurement, if it failed; the figures
	// are those of the one before.
	Err string `json:"error,omitempty"`
	// Projections has one entry per projection of the processor.
	Projections []ProjectionLag `json:"projections"`
}

// ProjectionLag is one projection's lag behind a source.
type ProjectionLag struct {
	Projection string `json:"projection"`
	// Events and Behind are the source's (see Lag).
	Events        int64         `json:"events"`
	Behind        time.Duration `json:"-"`
	BehindSeconds float64       `json:"behind_seconds"`
	// LastApplied is the newest event of the source the projection applied
	// (or found applied already) in a batch this Source committed; before
	// it committed any, or without Run, the position the source resumes
	// from — the catch-up checkpoint, or the persistent group's — with
	// that event's creation time. Nil when unknown.
	LastApplied *Point `json:"last_applied,omitempty"`
}

// Lag returns the source's lag as of its last measurement (Run measures
// every Config.LagEvery; MeasureLag measures now), with what the source
// received and committed since. It does no I/O.
//
// Catch-up mode: Events is the events received and not committed (they
// are in flight) plus those after the last one received up to the head of
// $all under the source's filter, counted by reading $all back from its
// head (estimated past lagScanMax events). Behind is the age of the oldest
// event in flight, or of the first one not received.
//
// Persistent mode: from the group's statistics (GetPersistentSubscriptionInfo):
// Events is what the group holds in flight, in its buffers and waiting for
// a retry, plus the events after the last one it read, up to the head of
// its stream (or of $all under the filter). Behind is the age of the first
// event after the group's last checkpoint, which the server writes every
// CheckpointAfter (2 s by default) once CheckpointLowerBound (10) events were
// acknowledged, so it can read up to that much high while events flow.
//
// Once Run has returned the source consumes nothing and has no lag: Lag
// is not Known (and the metrics leave the lag series out).
func (s *Source) Lag() Lag {
	s.lagMu.Lock()
	p := s.probe
	applied := maps.Clone(s.applied)
	s.lagMu.Unlock()
	l := Lag{Source: s.cfg.Name, Mode: s.mode(), Projections: []ProjectionLag{}}
	if s.stopped.Load() {
		// A source that stopped consumes nothing: it has no lag, and its
		// last measure would only grow stale (the metrics leave it out).
		l.Err = "the source is stopped"
		return l
	}
	if p.err != nil {
		l.Err = p.err.Error()
	}
	if !p.at.IsZero() {
		l.Known, l.MeasuredAt, l.Head, l.Estimated = true, p.at, p.head, p.estimated
		var oldest time.Time
		if s.cfg.Persistent == nil {
			ahead, inFlight := p.ahead, 0
			if s.running.Load() {
				_, tracked, _ := s.tracker.Last()
				ahead = max(0, ahead-(tracked-p.base))
				inFlight = s.disp.Stats().InFlight
				if tp, ok := s.tracker.Oldest(); ok {
					oldest = tp.at
				}
			}
			l.Events = int64(inFlight) + ahead
			if oldest.IsZero() && ahead > 0 {
				oldest = p.firstAhead
			}
		} else {
			l.Events, oldest = p.events, p.oldest
		}
		if l.Events > 0 && !oldest.IsZero() {
			l.Behind = max(0, time.Since(oldest))
		}
		l.BehindSeconds = l.Behind.Seconds()
	}
	for _, name := range s.cfg.Processor.Projections() {
		pl := ProjectionLag{Projection: name, Events: l.Events, Behind: l.Behind, BehindSeconds: l.BehindSeconds, LastApplied: p.lastApplied}
		if a := applied[name]; a != nil {
			pl.LastApplied = a
		}
		l.Projections = append(l.Projections, pl)
	}
	return l
}

// MeasureLag asks the server how far the source is behind and returns the
// lag (see Lag). It needs no Run: a Source made with New just for it (the
// CLI's status does that) measures from the committed checkpoint (catch-up)
// or from the group's statistics (persistent). On error the lag of the last
// measurement is returned, with the error in Lag.Err.
func (s *Source) MeasureLag(ctx context.Context) (Lag, error) {
	p, err := s.measure(ctx)
	sourceutil.Keep(&s.lagMu, &s.probe, p, err, func(last *lagProbe, err error) { last.err = err })
	return s.Lag(), err
}

// lagLoop measures the lag now and every LagEvery until ctx is done.
func (s *Source) lagLoop(ctx context.Context) {
	s.every(ctx, s.cfg.LagEvery, true, slog.LevelDebug, "esdb lag not measured", func(ctx context.Context) error {
		_, err := s.MeasureLag(ctx)
		return err
	})
}

func (s *Source) measure(ctx context.Context) (lagProbe, error) {
	client, err := s.cfg.newClient()
	if err != nil {
		return lagProbe{}, err
	}
	defer client.Close()
	if s.cfg.Persistent != nil {
		return s.measurePersistent(ctx, client)
	}
	return s.measureCatchUp(ctx, client)
}

func (s *Source) measureCatchUp(ctx context.Context, client *esdbc.Client) (lagProbe, error) {
	p := lagProbe{at: time.Now()}
	running := s.running.Load()
	var from esdbc.Position
	var hasFrom bool
	if running {
		var tp tpos
		tp, p.base, hasFrom = s.tracker.Last()
		from = tp.Position
	}
	if !hasFrom {
		cp, ok, err := s.loadCheckpoint(ctx)
		if err != nil {
			return p, fmt.Errorf("esdb: lag: %w", err)
		}
		from, hasFrom = cp, ok
		if ok && !running {
			if p.lastApplied, err = s.pointAt(ctx, client, cp); err != nil {
				return p, err
			}
		}
	}
	t, err := s.scanBack(ctx, client, from, hasFrom)
	if err != nil {
		return p, err
	}
	p.head, p.ahead, p.estimated, p.firstAhead = t.head, t.n, t.estimated, t.first
	if t.n > 0 && t.first.IsZero() {
		if p.firstAhead, err = s.firstAfter(ctx, client, from, hasFrom); err != nil {
			return p, err
		}
	}
	return p, nil
}

func (s *Source) measurePersistent(ctx context.Context, client *esdbc.Client) (lagProbe, error) {
	p := lagProbe{at: time.Now()}
	ps := s.cfg.Persistent
	var info *esdbc.PersistentSubscriptionInfo
	var err error
	if ps.Stream == "" {
		info, err = client.GetPersistentSubscriptionInfoToAll(ctx, ps.Group, esdbc.GetPersistentSubscriptionOptions{})
	} else {
		info, err = client.GetPersistentSubscriptionInfo(ctx, ps.Stream, ps.Group, esdbc.GetPersistentSubscriptionOptions{})
	}
	if err != nil {
		return p, fmt.Errorf("esdb: lag: group %s: %w", ps.Group, err)
	}
	st := info.Stats
	if st == nil {
		return p, fmt.Errorf("esdb: lag: group %s: no statistics", ps.Group)
	}
	p.events = st.OutstandingMessagesCount + st.RetryBufferCount + st.ReadBufferCount + st.LiveBufferCount
	running := s.running.Load()
	if ps.Stream == "" {
		var from esdbc.Position
		if st.LastKnownPosition != nil {
			from = *st.LastKnownPosition
		}
		t, err := s.scanBack(ctx, client, from, st.LastKnownPosition != nil)
		if err != nil {
			return p, err
		}
		p.head, p.estimated = t.head, t.estimated
		p.events += t.n
		var cp esdbc.Position
		if st.LastCheckpointedPosition != nil {
			cp = *st.LastCheckpointedPosition
			if !running {
				if p.lastApplied, err = s.pointAt(ctx, client, cp); err != nil {
					return p, err
				}
			}
		}
		if p.events > 0 {
			if p.oldest, err = s.firstAfter(ctx, client, cp, st.LastCheckpointedPosition != nil); err != nil {
				return p, err
			}
		}
		return p, nil
	}
	head, headRev, err := s.streamEvent(ctx, client, ps.Stream, esdbc.End{}, esdbc.Backwards)
	if err != nil {
		return p, err
	}
	p.head = head
	if head != nil {
		known := int64(-1)
		if st.LastKnownEventRevision != nil {
			known = int64(*st.LastKnownEventRevision)
		}
		p.events += max(0, int64(headRev)-known)
	}
	next := esdbc.StreamPosition(esdbc.Start{})
	if rev := st.LastCheckpointedEventRevision; rev != nil {
		next = esdbc.Revision(*rev + 1)
		if !running {
			if p.lastApplied, _, err = s.streamEvent(ctx, client, ps.Stream, esdbc.Revision(*rev), esdbc.Forwards); err != nil {
				return p, err
			}
		}
	}
	if p.events > 0 {
		first, _, err := s.streamEvent(ctx, client, ps.Stream, next, esdbc.Forwards)
		if err != nil {
			return p, err
		}
		if first != nil {
			p.oldest = first.Time
		}
	}
	return p, nil
}

// tail is what scanBack found.
type tail struct {
	n         int64     // events matching the filter after from
	estimated bool      // n is extrapolated
	head      *Point    // the newest of them
	first     time.Time // creation time of the oldest of them (zero when estimated)
}

// scanBack counts the events matching the source's filter after from (after
// the start of $all when hasFrom is false), reading $all back from its head;
// the head is the newest of them, or the event at from when there are none.
// Past lagScanMax events it stops and extrapolates from the positions: the
// events per byte of the part read, times the bytes left.
func (s *Source) scanBack(ctx context.Context, client *esdbc.Client, from esdbc.Position, hasFrom bool) (tail, error) {
	var t tail
	var start esdbc.AllPosition = esdbc.End{}
	var top, lowest esdbc.Position
	scanned := 0
	for {
		rs, err := client.ReadAll(ctx, esdbc.ReadAllOptions{From: start, Direction: esdbc.Backwards}, lagPage)
		if err != nil {
			return t, fmt.Errorf("esdb: lag: read $all: %w", err)
		}
		got, reached := 0, false
		for {
			ev, err := safeRead(rs)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rs.Close()
				return t, fmt.Errorf("esdb: lag: read $all: %w", err)
			}
			got++
			scanned++
			rec := ev.OriginalEvent()
			if hasFrom && !less(from, rec.Position) {
				reached = true
				break
			}
			if scanned == 1 {
				top = rec.Position
			}
			lowest = rec.Position
			if _, err := s.cfg.mapRead(ev.Event); errors.Is(err, ErrSkipped) {
				continue
			}
			t.n++
			if t.head == nil {
				t.head = allPoint(rec.Position, rec.CreatedDate)
			}
			t.first = rec.CreatedDate
		}
		rs.Close()
		if reached && t.head == nil {
			// Nothing new: the head is where the reader stands.
			h, err := s.pointAt(ctx, client, from)
			if err != nil {
				return t, err
			}
			t.head = h
		}
		if reached || got < lagPage {
			return t, nil
		}
		if scanned >= lagScanMax {
			break
		}
		start = lowest
	}
	t.estimated, t.first = true, time.Time{}
	if span := top.Commit - lowest.Commit; span > 0 {
		left := lowest.Commit - min(from.Commit, lowest.Commit)
		t.n += int64(float64(max(t.n, 1)) / float64(span) * float64(left))
	}
	return t, nil
}

// firstAfter returns the creation time of the first event matching the
// filter after from (from the start of $all when hasFrom is false), within
// one page; zero if none.
func (s *Source) firstAfter(ctx context.Context, client *esdbc.Client, from esdbc.Position, hasFrom bool) (time.Time, error) {
	var start esdbc.AllPosition = esdbc.Start{}
	if hasFrom {
		start = from
	}
	rs, err := client.ReadAll(ctx, esdbc.ReadAllOptions{From: start}, lagPage)
	if err != nil {
		return time.Time{}, fmt.Errorf("esdb: lag: read $all: %w", err)
	}
	defer rs.Close()
	for {
		ev, err := safeRead(rs)
		if errors.Is(err, io.EOF) {
			return time.Time{}, nil
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("esdb: lag: read $all: %w", err)
		}
		rec := ev.OriginalEvent()
		if hasFrom && !less(from, rec.Position) {
			continue
		}
		if _, err := s.cfg.mapRead(ev.Event); errors.Is(err, ErrSkipped) {
			continue
		}
		return rec.CreatedDate, nil
	}
}

// pointAt returns the event at position p of $all as a Point; only the
// position when it cannot be read.
func (s *Source) pointAt(ctx context.Context, client *esdbc.Client, p esdbc.Position) (*Point, error) {
	pt := allPoint(p, time.Time{})
	rs, err := client.ReadAll(ctx, esdbc.ReadAllOptions{From: p}, 1)
	if err != nil {
		return nil, fmt.Errorf("esdb: lag: read $all: %w", err)
	}
	defer rs.Close()
	ev, err := safeRead(rs)
	if err == nil && ev.OriginalEvent().Position == p {
		pt.Time = ev.OriginalEvent().CreatedDate
	}
	return pt, nil
}

// streamEvent reads one event of a stream from pos in direction dir and
// returns it as a Point with its revision; nil when there is none (the
// stream does not exist, or nothing is there).
func (s *Source) streamEvent(ctx context.Context, client *esdbc.Client, stream string, pos esdbc.StreamPosition, dir esdbc.Direction) (*Point, uint64, error) {
	rs, err := client.ReadStream(ctx, stream, esdbc.ReadStreamOptions{From: pos, Direction: dir}, 1)
	if err != nil {
		return nil, 0, fmt.Errorf("esdb: lag: read %s: %w", stream, err)
	}
	defer rs.Close()
	ev, err := safeRead(rs)
	if errors.Is(err, io.EOF) || goneReason(err, stream) != "" {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("esdb: lag: read %s: %w", stream, err)
	}
	rec := ev.OriginalEvent()
	pt := allPoint(rec.Position, rec.CreatedDate)
	pt.Position = fmt.Sprintf("%d@%s", rec.EventNumber, stream)
	return pt, rec.EventNumber, nil
}

// Feed returns the source as a source.Feed: the interface through which
// package cli's run command and the conformance suite of package
// source/sourcetest run every kind of source. Its Lag is Source.Lag's
// summary.
func (s *Source) Feed() source.Feed { return sourceutil.Feed[Lag](s) }

// Summary returns the figures of l every source reports (source.Lag).
func (l Lag) Summary() source.Lag {
	return source.Lag{Source: l.Source, Known: l.Known, MeasuredAt: l.MeasuredAt, Events: l.Events,
		Behind: l.Behind, BehindSeconds: l.Behind.Seconds(), Err: l.Err}
}
