package nats

import (
	"context"
	"fmt"
	"strconv"

	"github.com/inorder/inorder/projection"
)

// Read implements projection.Stream, for a rebuild side by side: it reads
// the stream in order from right after the sequence from (its start when
// from is nil) up to its last message matching the filter when Read
// begins, and calls fn with batches of up to BatchSize mapped messages
// (those the mapping rejects in Rejects), each with the sequence of its last
// message as its Position. A stream that no longer holds every message it
// stored is refused (ErrIncomplete) unless AllowIncomplete is set.
func (r *Replayer) Read(ctx context.Context, from projection.Position, fn func(context.Context, projection.StreamBatch) error) error {
	var after uint64
	if len(from) > 0 {
		n, err := strconv.ParseUint(string(from), 10, 64)
		if err != nil {
			return fmt.Errorf("nats: read from position %q: not a stream sequence", from)
		}
		after = n
	}
	js, st, done, err := r.stream(ctx, "read")
	if err != nil {
		return err
	}
	defer done()
	info := st.CachedInfo()
	if err := incomplete(info); err != nil && !r.AllowIncomplete && after == 0 {
		return err
	}
	end, err := r.lastMatching(ctx, st, info)
	if err != nil || end <= after {
		return err
	}
	r.first.Store(after)
	r.end.Store(end)
	r.pos.Store(after)
	it, err := r.messages(ctx, js, "read", after)
	if err != nil {
		return err
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	var sb projection.StreamBatch
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("nats: read: %w", err)
		}
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("nats: read: %w", err)
		}
		seq := md.Sequence.Stream
		e, merr := r.cfg.mapping.event(m.Subject(), m.Headers(), m.Data())
		e.RecordedAt = md.Timestamp
		if merr != nil {
			if len(e.Metadata) == 0 {
				e.Metadata = whereMeta(r.cfg.Stream, m.Subject(), seq)
			}
			sb.Rejects = append(sb.Rejects, projection.Reject{Event: e, Err: merr})
		} else {
			sb.Events = append(sb.Events, e)
		}
		sb.Read++
		sb.Position = projection.Position(strconv.FormatUint(seq, 10))
		sb.Time = md.Timestamp
		r.read.Add(1)
		r.pos.Store(seq)
		last := seq >= end || md.NumPending == 0
		if int(sb.Read) >= r.cfg.BatchSize || last || md.NumPending == 0 {
			if err := fn(ctx, sb); err != nil {
				return err
			}
			sb = projection.StreamBatch{}
		}
		if last {
			return nil
		}
	}
}

// Fraction implements projection.StreamProgress.
func (r *Replayer) Fraction() float64 { return r.Progress().Fraction }

var _ projection.Stream = (*Replayer)(nil)
