package nats

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/inorder/inorder/source/internal/sourceutil"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// ErrIncomplete is wrapped by the error Replay returns when the stream no
// longer holds every message it stored: its retention (MaxAge, MaxMsgs,
// MaxBytes, a work-queue or interest policy) or a purge removed some, so a
// rebuild from it would miss events. Replayer.AllowIncomplete replays what
// is left anyway.
var ErrIncomplete = errors.New("nats: the stream cannot be replayed from its start")

// Replayer replays a stream into a projection being rebuilt: its Replay
// method is a [projection.Replay] for an in-place [projection.Processor.Build]
// ([projection.BuildOptions].InPlace). It
// reads the stream with an ordered consumer (ephemeral, no acks) from its
// first message up to the last one matching the filter when the replay
// begins, maps the messages as a Source of the same Config does, and emits
// them in batches, partitioned by aggregate across workers so that each
// aggregate's messages arrive in stream order. What is published after
// that is the live workers' to apply.
type Replayer struct {
	cfg *config

	// AllowIncomplete replays a stream whose retention or a purge removed
	// messages (see ErrIncomplete) instead of refusing to.
	AllowIncomplete bool

	first, end, pos atomic.Uint64
	read            atomic.Int64
}

// NewReplayer validates cfg and returns a Replayer that reads with its
// connection (URL or Conn), stream and Subjects, maps messages with its
// Mapping and emits batches of up to BatchSize events from Workers
// goroutines (defaults 500 and 4). Processor may be nil; the other fields
// are ignored.
func NewReplayer(cfg *Config) (*Replayer, error) {
	c, err := newConfig(cfg, true)
	if err != nil {
		return nil, err
	}
	return &Replayer{cfg: c}, nil
}

// ReplayProgress is how far a replay is.
type ReplayProgress struct {
	// Read counts the messages read and emitted.
	Read int64
	// Fraction is how far the reading is through the stream, by sequence,
	// from 0 to 1.
	Fraction float64
}

// Progress returns how far the running (or the last) replay is. It is safe
// to call from any goroutine.
func (r *Replayer) Progress() ReplayProgress {
	first, end, pos := r.first.Load(), r.end.Load(), r.pos.Load()
	p := ReplayProgress{Read: r.read.Load()}
	switch {
	case end == 0:
	case pos >= end:
		p.Fraction = 1
	case end > first && pos > first:
		p.Fraction = float64(pos-first) / float64(end-first)
	}
	return p
}

// Check returns an error wrapping ErrIncomplete when the stream no longer
// holds every message it stored, saying why, and nil when a replay would
// see them all.
func (r *Replayer) Check(ctx context.Context, js jetstream.JetStream) error {
	st, err := js.Stream(ctx, r.cfg.Stream)
	if err != nil {
		return fmt.Errorf("nats: replay: stream %s: %w", r.cfg.Stream, err)
	}
	return incomplete(st.CachedInfo())
}

func incomplete(info *jetstream.StreamInfo) error {
	cfg, state := info.Config, info.State
	var why string
	switch {
	case cfg.Retention == jetstream.WorkQueuePolicy:
		why = "it has the work-queue retention policy: a message is removed once acknowledged"
	case cfg.Retention == jetstream.InterestPolicy && state.FirstSeq > 1:
		why = "it has the interest retention policy: a message is removed once every consumer acknowledged it"
	case state.FirstSeq > 1:
		why = fmt.Sprintf("its first message is sequence %d: the %d before were removed (MaxAge %s, MaxMsgs %d, MaxBytes %d, or a purge)",
			state.FirstSeq, state.FirstSeq-1, cfg.MaxAge, cfg.MaxMsgs, cfg.MaxBytes)
	case state.NumDeleted > 0:
		why = fmt.Sprintf("%d messages were deleted from it", state.NumDeleted)
	default:
		return nil
	}
	return fmt.Errorf("%w: stream %s: %s. Rebuild from a stream that keeps every event (retention limits with no MaxAge, MaxMsgs or MaxBytes that binds), or allow an incomplete replay", ErrIncomplete, cfg.Name, why)
}

// Replay reads the stream up to its last matching message and calls emit
// with batches of mapped events, from several goroutines: an aggregate's
// events all go to one of them, in stream order. A message the mapping
// cannot turn into a valid envelope is emitted as it is, and the processor
// records it as rejected. The first error of emit or of the read stops the
// replay and is returned. Replay implements [projection.Replay].
func (r *Replayer) Replay(ctx context.Context, emit func(context.Context, []aggregate.Event) error) error {
	r.first.Store(0)
	r.end.Store(0)
	r.pos.Store(0)
	r.read.Store(0)
	js, st, done, err := r.stream(ctx, "replay")
	if err != nil {
		return err
	}
	defer done()
	info := st.CachedInfo()
	if err := incomplete(info); err != nil && !r.AllowIncomplete {
		return err
	}
	end, err := r.lastMatching(ctx, st, info)
	if err != nil || end == 0 {
		return err
	}
	r.first.Store(info.State.FirstSeq)
	r.end.Store(end)

	it, err := r.messages(ctx, js, "replay", 0)
	if err != nil {
		return err
	}
	defer it.Stop()

	return sourceutil.FanOut(ctx, r.cfg.Workers, r.cfg.BatchSize, emit, func(ctx context.Context, send func(aggregate.Event) error) error {
		defer context.AfterFunc(ctx, it.Stop)()
		for {
			m, err := it.Next()
			if err != nil {
				if c := context.Cause(ctx); c != nil {
					return c
				}
				return fmt.Errorf("nats: replay: %w", err)
			}
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("nats: replay: %w", err)
			}
			e, _ := r.cfg.mapping.event(m.Subject(), m.Headers(), m.Data())
			e.RecordedAt = md.Timestamp
			if err := send(e); err != nil {
				return err
			}
			r.read.Add(1)
			r.pos.Store(md.Sequence.Stream)
			if md.Sequence.Stream >= end || md.NumPending == 0 {
				return nil
			}
		}
	})
}

// stream connects (as "inorder <name> <what>") and returns the stream to
// read; done closes the connection if the replayer made it. what names the
// reading in errors.
func (r *Replayer) stream(ctx context.Context, what string) (js jetstream.JetStream, st jetstream.Stream, done func(), err error) {
	nc, owned, err := r.cfg.connect("inorder " + r.cfg.Name + " " + what)
	if err != nil {
		return nil, nil, nil, err
	}
	done = func() {
		if owned {
			nc.Close()
		}
	}
	js, err = jetstream.New(nc)
	if err != nil {
		done()
		return nil, nil, nil, fmt.Errorf("nats: %w", err)
	}
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	st, err = js.Stream(ictx, r.cfg.Stream)
	cancel()
	if err != nil {
		done()
		return nil, nil, nil, fmt.Errorf("nats: %s: stream %s: %w", what, r.cfg.Stream, err)
	}
	return js, st, done, nil
}

// messages reads the stream's messages matching Subjects, in order, from
// the first (after 0) or from the one after sequence after. what names the
// reading in errors.
func (r *Replayer) messages(ctx context.Context, js jetstream.JetStream, what string, after uint64) (jetstream.MessagesContext, error) {
	occ := jetstream.OrderedConsumerConfig{FilterSubjects: r.cfg.Subjects, DeliverPolicy: jetstream.DeliverAllPolicy}
	if after > 0 {
		occ.DeliverPolicy, occ.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	cons, err := js.OrderedConsumer(ctx, r.cfg.Stream, occ)
	if err != nil {
		return nil, fmt.Errorf("nats: %s: %w", what, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(max(r.cfg.PullBatch, 1000)))
	if err != nil {
		return nil, fmt.Errorf("nats: %s: %w", what, err)
	}
	return it, nil
}

// lastMatching returns the sequence of the stream's last message matching
// the filter, 0 when there is none.
func (r *Replayer) lastMatching(ctx context.Context, st jetstream.Stream, info *jetstream.StreamInfo) (uint64, error) {
	if info.State.Msgs == 0 {
		return 0, nil
	}
	if len(r.cfg.Subjects) == 0 {
		return info.State.LastSeq, nil
	}
	var end uint64
	for _, subj := range r.cfg.Subjects {
		m, err := st.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("nats: replay: last message on %s: %w", subj, err)
		}
		end = max(end, m.Sequence)
	}
	return end, nil
}

var _ projection.Replay = (*Replayer)(nil).Replay
