package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/internal/sourceutil"
)

// Lag is how far the consumer is behind the stream, over all the processes
// that share it. Every projection of the processor processes every batch in
// the same transaction, so the projections' lag is the source's; each has
// its own last applied message.
type Lag struct {
	// Source is Config.Name; Mode is "pull".
	Source string `json:"source"`
	Mode   string `json:"mode"`
	// Known is false until a measurement succeeded: the other figures are
	// zero then.
	Known bool `json:"known"`
	// MeasuredAt is when the server was last asked.
	MeasuredAt time.Time `json:"measured_at,omitzero"`
	// Events counts the messages matching the consumer's filter that are
	// not acknowledged: not delivered yet (the consumer's pending count)
	// plus delivered and not acknowledged (its ack pending count).
	Events int64 `json:"events"`
	// Behind is the age of the oldest of them — the first message after
	// the consumer's ack floor, by the time the stream stored it — and 0
	// when Events is 0 (BehindSeconds in JSON).
	Behind        time.Duration `json:"-"`
	BehindSeconds float64       `json:"behind_seconds"`
	// Head is the stream's last message, if any.
	Head *Point `json:"head,omitempty"`
	// Err is the error of the last measurement, if it failed; the figures
	// are those of the one before.
	Err string `json:"error,omitempty"`
	// Projections has one entry per projection of the processor.
	Projections []ProjectionLag `json:"projections"`
}

// ProjectionLag is one projection's lag behind the source.
type ProjectionLag struct {
	Projection string `json:"projection"`
	// Events and Behind are the source's (see Lag).
	Events        int64         `json:"events"`
	Behind        time.Duration `json:"-"`
	BehindSeconds float64       `json:"behind_seconds"`
	// LastApplied is the newest message (by stream sequence) the projection
	// applied, or found applied already, in a batch this Source committed;
	// before it committed any, or without Run, the consumer's ack floor.
	// Nil when unknown.
	LastApplied *Point `json:"last_applied,omitempty"`
}

// Lag returns the lag as of the last measurement (Run measures every
// Config.LagEvery; MeasureLag measures now). It does no I/O.
func (s *Source) Lag() Lag {
	s.lagMu.Lock()
	p := s.probe
	applied := maps.Clone(s.applied)
	s.lagMu.Unlock()
	l := Lag{Source: s.cfg.Name, Mode: "pull", Projections: []ProjectionLag{}}
	if p.err != nil {
		l.Err = p.err.Error()
	}
	if !p.at.IsZero() {
		l.Known, l.MeasuredAt, l.Head, l.Events = true, p.at, p.head, p.events
		if l.Events > 0 && !p.oldest.IsZero() {
			l.Behind = max(0, time.Since(p.oldest))
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

// MeasureLag asks the server how far the consumer is behind and returns the
// lag (see Lag). It needs no Run: a Source made with New just for it (the
// CLI's status does that) connects for the measurement. On error the lag of
// the last measurement is returned, with the error in Lag.Err.
func (s *Source) MeasureLag(ctx context.Context) (Lag, error) {
	p, err := s.measure(ctx)
	sourceutil.Keep(&s.lagMu, &s.probe, p, err, func(last *lagProbe, err error) { last.err = err })
	return s.Lag(), err
}

func (s *Source) lagLoop(ctx context.Context) {
	sourceutil.Every(ctx, s.cfg.LagEvery, true, func() {
		if _, err := s.MeasureLag(ctx); err != nil && ctx.Err() == nil {
			s.log.Log(ctx, slog.LevelDebug, "nats lag not measured", "name", s.cfg.Name, "error", err)
		}
	})
}

func (s *Source) measure(ctx context.Context) (lagProbe, error) {
	s.jsMu.Lock()
	js := s.js
	s.jsMu.Unlock()
	if js == nil {
		nc, owned, err := s.cfg.connect("inorder " + s.cfg.Name + " lag")
		if err != nil {
			return lagProbe{}, err
		}
		if owned {
			defer nc.Close()
		}
		if js, err = jetstream.New(nc); err != nil {
			return lagProbe{}, fmt.Errorf("nats: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	p := lagProbe{at: time.Now()}
	st, err := js.Stream(ctx, s.cfg.Stream)
	if err != nil {
		return p, fmt.Errorf("nats: lag: stream %s: %w", s.cfg.Stream, err)
	}
	if info := st.CachedInfo(); info != nil && info.State.LastSeq > 0 {
		p.head = seqPoint(info.State.LastSeq, info.State.LastTime)
	}
	cons, err := st.Consumer(ctx, s.cfg.Consumer)
	if err != nil {
		return p, fmt.Errorf("nats: lag: consumer %s: %w", s.cfg.Consumer, err)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		return p, fmt.Errorf("nats: lag: consumer %s: %w", s.cfg.Consumer, err)
	}
	p.events = int64(ci.NumPending) + int64(ci.NumAckPending)
	floor := ci.AckFloor.Stream
	if !s.running.Load() && floor > 0 {
		p.lastApplied = seqPoint(floor, time.Time{})
	}
	if p.events > 0 {
		if p.oldest, err = s.firstAfter(ctx, st, floor); err != nil {
			return p, err
		}
		if s.running.Load() {
			// What this process holds may be older than what the server
			// counts from the floor (it was delivered again elsewhere).
			if at, ok := s.held.oldest(); ok && at.Before(p.oldest) {
				p.oldest = at
			}
		}
	}
	return p, nil
}

// firstAfter returns when the stream stored its first message after seq
// that matches the consumer's filter.
func (s *Source) firstAfter(ctx context.Context, st jetstream.Stream, seq uint64) (time.Time, error) {
	subjects := s.cfg.Subjects
	if len(subjects) == 0 {
		subjects = []string{">"}
	}
	var first time.Time
	for _, subj := range subjects {
		m, err := st.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("nats: lag: first message after %d: %w", seq, err)
		}
		if first.IsZero() || m.Time.Before(first) {
			first = m.Time
		}
	}
	return first, nil
}

// afterCommit counts the batch's outcomes, notes the newest message each
// projection applied, and tells OnCommit.
func (s *Source) afterCommit(batch []*source.Delivery, results []projection.Result) {
	outcomes := map[projection.Outcome]int{}
	for _, d := range batch {
		if d.Reject != nil {
			outcomes[projection.Rejected]++
		}
	}
	names := s.cfg.Processor.Projections()
	top := make([]*held, len(names))
	for d, r := range sourceutil.Processed(batch, results) {
		outcomes[r.Outcome]++
		h := d.Handle.(*held)
		for j, o := range r.Projections {
			if (o == projection.Applied || o == projection.Duplicate) && j < len(top) && (top[j] == nil || top[j].seq < h.seq) {
				top[j] = h
			}
		}
	}
	s.stats.rejected.Add(int64(outcomes[projection.Rejected]))
	s.lagMu.Lock()
	for j, h := range top {
		if h == nil {
			continue
		}
		if cur := s.applied[names[j]]; cur == nil || cur.Sequence < h.seq {
			s.applied[names[j]] = seqPoint(h.seq, h.at)
		}
	}
	s.lagMu.Unlock()
	if s.cfg.OnCommit != nil {
		s.cfg.OnCommit(Commit{Deliveries: len(batch), Outcomes: outcomes})
	}
}
