package cli

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
)

// replayPage is how many $all events one read request asks for.
const replayPage = 4096

// replayer reads EventStoreDB's $all from the start to the position of its
// last event when the replay begins, maps the events as the workers do
// (esdb.Mapping, --type-regex) and emits them in batches, partitioned by
// aggregate across workers so each aggregate's versions arrive in order.
type replayer struct {
	opts      *esdbOptions
	workers   int
	batchSize int
	logger    *slog.Logger

	// first, end and pos are $all commit positions: of the first event,
	// of the last one at the start, and of the last one read.
	first, end, pos atomic.Uint64
	nread, skipped  atomic.Int64
}

// newClient connects to EventStoreDB.
func newESDBClient(url string, logger *slog.Logger) (*esdbc.Client, error) {
	cfg, err := esdbc.ParseConnectionString(url)
	if err != nil {
		return nil, fmt.Errorf("esdb: %w", err)
	}
	cfg.Logger = func(level esdbc.LogLevel, format string, args ...any) {
		logger.Debug("esdb client: "+fmt.Sprintf(format, args...), "level", level)
	}
	c, err := esdbc.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("esdb: %w", err)
	}
	return c, nil
}

// fraction returns how far the reading is through $all, by position.
func (r *replayer) fraction() float64 {
	first, end, pos := r.first.Load(), r.end.Load(), r.pos.Load()
	if end <= first || pos <= first {
		if end != 0 && pos >= end {
			return 1
		}
		return 0
	}
	return min(float64(pos-first)/float64(end-first), 1)
}

// replay implements projection.Replay.
func (r *replayer) replay(ctx context.Context, emit func(context.Context, []aggregate.Event) error) error {
	var typeRe *regexp.Regexp
	if r.opts.TypeRegex != "" {
		re, err := regexp.Compile(r.opts.TypeRegex)
		if err != nil {
			return fmt.Errorf("--type-regex: %w", err)
		}
		typeRe = re
	}
	client, err := newESDBClient(r.opts.URL, r.logger)
	if err != nil {
		return err
	}
	defer client.Close()
	end, ok, err := lastPosition(ctx, client)
	if err != nil || !ok {
		return err
	}
	r.end.Store(end.Commit)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	chans := make([]chan aggregate.Event, r.workers)
	var wg sync.WaitGroup
	for i := range chans {
		chans[i] = make(chan aggregate.Event, r.batchSize)
		wg.Go(func() {
			batch := make([]aggregate.Event, 0, r.batchSize)
			failed := false
			flush := func() {
				if len(batch) > 0 && !failed {
					if err := emit(ctx, batch); err != nil {
						cancel(err)
						failed = true
					}
				}
				batch = make([]aggregate.Event, 0, r.batchSize)
			}
			for e := range chans[i] {
				if failed {
					continue // drain: the reader stops on ctx
				}
				batch = append(batch, e)
				// Send a batch when it is full, or when nothing more is
				// queued: the reader is waiting on the server.
				if len(batch) >= r.batchSize || len(chans[i]) == 0 {
					flush()
				}
			}
			flush()
		})
	}
	readErr := r.read(ctx, client, end, typeRe, func(e aggregate.Event) error {
		h := fnv.New64a()
		h.Write([]byte(e.Aggregate))
		select {
		case chans[h.Sum64()%uint64(len(chans))] <- e:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	for _, ch := range chans {
		close(ch)
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return readErr
}

// read pages through $all up to end, calling fn with every mapped event.
func (r *replayer) read(ctx context.Context, client *esdbc.Client, end esdbc.Position, typeRe *regexp.Regexp, fn func(aggregate.Event) error) error {
	var from esdbc.AllPosition = esdbc.Start{}
	var last *esdbc.Position
	for {
		rs, err := client.ReadAll(ctx, esdbc.ReadAllOptions{Direction: esdbc.Forwards, From: from}, replayPage)
		if err != nil {
			return fmt.Errorf("esdb: read $all: %w", err)
		}
		n, done, err := r.page(rs, &last, end, typeRe, fn)
		rs.Close()
		if err != nil || done || n < replayPage {
			return err
		}
		from = *last
	}
}

// page reads one ReadAll response. A read starts at its position inclusive:
// the event at *last, already handled, is skipped.
func (r *replayer) page(rs *esdbc.ReadStream, last **esdbc.Position, end esdbc.Position, typeRe *regexp.Regexp, fn func(aggregate.Event) error) (n int, done bool, err error) {
	for {
		ev, err := rs.Recv()
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
		r.nread.Add(1)
		if typeRe != nil && !typeRe.MatchString(rec.EventType) {
			r.skipped.Add(1)
			continue
		}
		e, err := r.opts.mapping().Map(rec)
		if errors.Is(err, esdb.ErrSkipped) {
			r.skipped.Add(1)
			continue
		}
		// An event the mapping cannot turn into a valid envelope goes on as
		// it is: the processor records it as rejected, as the workers do.
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
	ev, err := rs.Recv()
	if errors.Is(err, io.EOF) {
		return esdbc.Position{}, false, nil
	}
	if err != nil {
		return esdbc.Position{}, false, fmt.Errorf("esdb: read the end of $all: %w", err)
	}
	return ev.OriginalEvent().Position, true, nil
}

var _ projection.Replay = (*replayer)(nil).replay
