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

	"github.com/inorder/inorder/source"
)

// This file holds the Source, its state and its counters, and what both
// kinds of session use to receive. run.go holds New and the run loop,
// catchup.go and persistent.go the two kinds of session, checkpoint.go the
// catch-up checkpoint.

// tpos is a catch-up position in the tracker, with the creation time of its
// event (zero for positions that were passed).
type tpos struct {
	esdbc.Position
	at time.Time
}

// ErrAborted is returned by Run when its drain was cut short by Abort or
// Config.DrainTimeout: the batches in flight were rolled back, and their
// events are delivered again on the next run. It wraps source.ErrAborted.
var ErrAborted = fmt.Errorf("esdb: %w", source.ErrAborted)

// Point is an event's place in EventStoreDB and its creation time.
type Point struct {
	// Position is the event's $all position as "C:<commit>/P:<prepare>",
	// or "<revision>@<stream>" for the stream of a persistent group.
	Position string `json:"position"`
	// Commit and Prepare are its $all position (zero when unknown).
	Commit  uint64 `json:"commit"`
	Prepare uint64 `json:"prepare"`
	// Time is the event's creation time, by the server's clock.
	Time time.Time `json:"time,omitzero"`
}

func allPoint(p esdbc.Position, at time.Time) *Point {
	return &Point{Position: fmt.Sprintf("C:%d/P:%d", p.Commit, p.Prepare), Commit: p.Commit, Prepare: p.Prepare, Time: at}
}

// lagProbe is one measurement.
type lagProbe struct {
	at          time.Time
	err         error
	head        *Point
	estimated   bool
	lastApplied *Point // the resuming position (see ProjectionLag.LastApplied)

	// catch-up: events after the received position (or the checkpoint),
	// and the tracker's count then, so that Lag subtracts what was
	// received since.
	ahead      int64
	base       int64
	firstAhead time.Time

	// persistent: the group's events not finished, and the creation time
	// of the first event after its checkpoint.
	events int64
	oldest time.Time
}

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
	batchCP  map[*source.Delivery]esdbc.Position // checkpoint a batch's transaction stores, by its first delivery

	// knownMissing holds the gaps gap repair recorded as missing at the
	// source (owned by the repair goroutine).
	knownMissing map[string]bool

	running atomic.Bool // Run is consuming
	stopped atomic.Bool // Run returned: the source has no lag to report
	lagMu   sync.Mutex
	probe   lagProbe          // the last lag measurement
	applied map[string]*Point // per projection, the newest event applied

	stats struct {
		received, skipped, rejected, acked, nacked, reconnects, repaired, gapsMissing atomic.Int64
	}
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

// mode names the Source's kind of subscription, in its logs and its Lag.
func (s *Source) mode() string {
	if s.cfg.Persistent != nil {
		return "persistent"
	}
	return "catch-up"
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

// receive runs a session's subscription once it is made: it calls
// Config.OnSubscribed, then hands each message of msgs to handle until soft
// is done (nil) or handle returns an error (a dropped subscription, a failed
// dispatch). handle reports whether the message was an event: progressed
// says whether any was.
func receive[T any](soft context.Context, s *Source, msgs <-chan *T, handle func(*T) (event bool, err error)) (progressed bool, err error) {
	if s.cfg.OnSubscribed != nil {
		s.cfg.OnSubscribed()
	}
	for {
		var m *T
		select {
		case <-soft.Done():
			return progressed, nil
		case m = <-msgs:
		}
		event, err := handle(m)
		progressed = progressed || event
		if err != nil {
			return progressed, err
		}
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
