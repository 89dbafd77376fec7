package esdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/inorder/inorder/source/internal/sourceutil"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// replayPage is how many $all events one read request asks for.
const replayPage = 4096

// Replayer replays EventStoreDB's $all into a projection being rebuilt: its
// Replay method is a [projection.Replay] for an in-place
// [projection.Processor.Build] ([projection.BuildOptions].InPlace).
// It reads $all from the start up to the position of its last event when
// the replay begins, maps and filters the events as a Source of the same
// Config does, and emits them in batches, partitioned by aggregate across
// workers so that each aggregate's versions arrive in order. The events
// appended after that position are the live workers' to apply.
type Replayer struct {
	cfg *config

	// first, end and pos are $all commit positions: of the first event,
	// of the last one when the replay began, and of the last one read.
	first, end, pos atomic.Uint64
	read, skipped   atomic.Int64
}

// NewReplayer validates cfg and returns a Replayer that reads with its
// connection (URL or Client), maps events with its Mapping, filters them by
// its StreamPrefixes and TypeRegex (on the client: a read of $all has no
// server-side filter) and emits batches of up to BatchSize events from
// Workers goroutines (defaults 500 and 4), logging to Logger. Processor may
// be nil; the other fields are ignored.
func NewReplayer(cfg *Config) (*Replayer, error) {
	c, err := newConfig(cfg, true)
	if err != nil {
		return nil, err
	}
	return &Replayer{cfg: c}, nil
}

// ReplayProgress is how far a replay is, for progress reports.
type ReplayProgress struct {
	// Read counts the $all events read; Skipped those of them that are not
	// for inorder (system events, other streams or types). The others were
	// emitted.
	Read, Skipped int64
	// Fraction is how far the reading is through $all, by commit position,
	// from 0 to 1.
	Fraction float64
}

// Progress returns how far the running (or the last) replay is. It is safe
// to call from any goroutine.
func (r *Replayer) Progress() ReplayProgress {
	return ReplayProgress{Read: r.read.Load(), Skipped: r.skipped.Load(), Fraction: r.fraction()}
}

// fraction returns how far the reading is through $all, by position.
func (r *Replayer) fraction() float64 {
	first, end, pos := r.first.Load(), r.end.Load(), r.pos.Load()
	if end <= first || pos <= first {
		if end != 0 && pos >= end {
			return 1
		}
		return 0
	}
	return min(float64(pos-first)/float64(end-first), 1)
}

// Replay reads $all up to its current end and calls emit with batches of
// mapped events, from several goroutines: an aggregate's events all go to
// one of them, in $all order. An event the mapping cannot turn into a valid
// envelope is emitted as it is, and the processor records it as rejected,
// as it does for the workers. The first error of emit or of the read stops
// the replay and is returned. Replay implements [projection.Replay].
func (r *Replayer) Replay(ctx context.Context, emit func(context.Context, []aggregate.Event) error) error {
	r.first.Store(0)
	r.end.Store(0)
	r.pos.Store(0)
	r.read.Store(0)
	r.skipped.Store(0)
	client, end, err := r.open(ctx)
	if err != nil || client == nil {
		return err
	}
	defer client.Close()
	r.end.Store(end.Commit)

	return sourceutil.FanOut(ctx, r.cfg.Workers, r.cfg.BatchSize, emit, func(ctx context.Context, send func(aggregate.Event) error) error {
		return r.readAll(ctx, client, end, send)
	})
}

// open connects and returns the client and the position of the last event
// in $all; a nil client when $all is empty (nothing to read).
func (r *Replayer) open(ctx context.Context) (*esdbc.Client, esdbc.Position, error) {
	client, err := r.cfg.newClient()
	if err != nil {
		return nil, esdbc.Position{}, err
	}
	end, ok, err := lastPosition(ctx, client)
	if err != nil || !ok {
		client.Close()
		return nil, end, err
	}
	return client, end, nil
}

// readAll pages through $all up to end, calling fn with every mapped event.
func (r *Replayer) readAll(ctx context.Context, client *esdbc.Client, end esdbc.Position, fn func(aggregate.Event) error) error {
	var from esdbc.AllPosition = esdbc.Start{}
	var last *esdbc.Position
	for {
		rs, err := client.ReadAll(ctx, esdbc.ReadAllOptions{Direction: esdbc.Forwards, From: from}, replayPage)
		if err != nil {
			return fmt.Errorf("esdb: read $all: %w", err)
		}
		n, done, err := r.page(rs, &last, end, fn)
		rs.Close()
		if err != nil || done || n < replayPage {
			return err
		}
		from = *last
	}
}

// page reads one ReadAll response. A read starts at its position inclusive:
// the event at *last, already handled, is skipped.
func (r *Replayer) page(rs *esdbc.ReadStream, last **esdbc.Position, end esdbc.Position, fn func(aggregate.Event) error) (n int, done bool, err error) {
	for {
		ev, err := safeRead(rs)
		if errors.Is(err, io.EOF) {
			return n, false, nil
		}
		if err != nil {
			return n, false, fmt.Errorf("esdb: read $all: %w", err)
		}
		n++
		rec := ev.OriginalEvent()
		if rec == nil {
			continue
		}
		pos := rec.Position
		if *last != nil && pos == **last {
			continue
		}
		if *last == nil {
			r.first.Store(pos.Commit)
		}
		*last = &pos
		if pos.Commit > end.Commit {
			return n, true, nil
		}
		r.pos.Store(pos.Commit)
		r.read.Add(1)
		e, err := r.cfg.mapRead(rec)
		if errors.Is(err, ErrSkipped) {
			r.skipped.Add(1)
			continue
		}
		if err := fn(e); err != nil {
			return n, false, err
		}
		if pos == end {
			return n, true, nil
		}
	}
}

// lastPosition returns the position of the last event in $all; ok is false
// when $all is empty.
func lastPosition(ctx context.Context, client *esdbc.Client) (esdbc.Position, bool, error) {
	rs, err := client.ReadAll(ctx, esdbc.ReadAllOptions{Direction: esdbc.Backwards, From: esdbc.End{}}, 1)
	if err != nil {
		return esdbc.Position{}, false, fmt.Errorf("esdb: read the end of $all: %w", err)
	}
	defer rs.Close()
	ev, err := safeRead(rs)
	if errors.Is(err, io.EOF) {
		return esdbc.Position{}, false, nil
	}
	if err != nil {
		return esdbc.Position{}, false, fmt.Errorf("esdb: read the end of $all: %w", err)
	}
	return ev.OriginalEvent().Position, true, nil
}

var _ projection.Replay = (*Replayer)(nil).Replay
