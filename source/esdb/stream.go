package esdb

import (
	"context"
	"errors"
	"fmt"
	"io"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/inorder/inorder/projection"
)

// This file makes a Replayer a projection.Stream: the history a
// side-by-side rebuild (projection.Processor.Build) reads, in $all order,
// from a position.

// Read reads $all in order, from right after position from (encoded as the
// checkpoints table encodes $all positions; nil: from the start) up to its
// last event when Read is called, and calls fn with each page of up to
// 4096 records: the events mapped and filtered as a Source of the same
// Config does (records that are not for inorder count in Read), records
// the mapping refuses as Rejects, the position of the page's last record
// and the time it was recorded. Read implements projection.Stream; one
// goroutine calls fn, and the replay's counters (Progress) follow it.
func (r *Replayer) Read(ctx context.Context, from projection.Position, fn func(context.Context, projection.StreamBatch) error) error {
	client, end, err := r.open(ctx)
	if err != nil || client == nil {
		return err
	}
	defer client.Close()
	var start esdbc.AllPosition = esdbc.Start{}
	var last *esdbc.Position
	if len(from) > 0 {
		p, err := decodePosition(from)
		if err != nil {
			return fmt.Errorf("esdb: read $all from %s: %w", from, err)
		}
		if !less(p, end) {
			return nil // nothing after it yet
		}
		start, last = p, &p
		r.first.Store(p.Commit)
	} else {
		r.first.Store(0)
	}
	r.end.Store(end.Commit)
	r.pos.Store(0)
	for {
		rs, err := client.ReadAll(ctx, esdbc.ReadAllOptions{Direction: esdbc.Forwards, From: start}, replayPage)
		if err != nil {
			return fmt.Errorf("esdb: read $all: %w", err)
		}
		sb, n, done, err := r.streamPage(rs, &last, end)
		rs.Close()
		if err != nil {
			return err
		}
		if sb.Read > 0 {
			if err := fn(ctx, sb); err != nil {
				return err
			}
		}
		if done || n < replayPage {
			return nil
		}
		start = *last
	}
}

// streamPage reads one ReadAll response into a batch: the records after
// *last up to end. A read starts at its position inclusive: the record at
// *last, already handled, is skipped. n counts the records received.
func (r *Replayer) streamPage(rs *esdbc.ReadStream, last **esdbc.Position, end esdbc.Position) (sb projection.StreamBatch, n int, done bool, err error) {
	for {
		ev, err := safeRead(rs)
		if errors.Is(err, io.EOF) {
			return sb, n, false, nil
		}
		if err != nil {
			return sb, n, false, fmt.Errorf("esdb: read $all: %w", err)
		}
		n++
		rec := ev.OriginalEvent()
		if rec == nil {
			continue
		}
		pos := rec.Position
		if *last != nil && !less(**last, pos) {
			continue
		}
		if less(end, pos) {
			return sb, n, true, nil // appended after the read began: the next Read's
		}
		*last = &pos
		if r.first.Load() == 0 {
			r.first.Store(pos.Commit)
		}
		r.pos.Store(pos.Commit)
		r.read.Add(1)
		sb.Read++
		sb.Position, sb.Time = encodePosition(pos), rec.CreatedDate
		e, err := r.cfg.mapRead(rec)
		switch {
		case errors.Is(err, ErrSkipped):
			r.skipped.Add(1)
		case err != nil:
			sb.Rejects = append(sb.Rejects, projection.Reject{Event: e, Err: err})
		default:
			sb.Events = append(sb.Events, e)
		}
		if pos == end {
			return sb, n, true, nil
		}
	}
}

// Fraction returns how far the running (or the last) Read or Replay is
// through $all, by commit position, from 0 to 1: the
// projection.StreamProgress of a rebuild.
func (r *Replayer) Fraction() float64 { return r.fraction() }

var (
	_ projection.Stream         = (*Replayer)(nil)
	_ projection.StreamProgress = (*Replayer)(nil)
)
