package generation

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file holds the catch-up of a side-by-side rebuild (Build, phase 3):
// the stream read to its end through the gate, again while a pass reads
// much; the hold (hold.go) and verification (switch.go) read it again
// while they wait.

// catchUp reads the stream from the generation's position to its end
// through the gate, storing the position with each batch, until a pass
// reads no more than Options.CatchUpEvents records.
func (b *builder) catchUp(ctx context.Context) error {
	if err := b.setPhase(ctx, PhaseCatchUp, b.opts.Fraction); err != nil {
		return err
	}
	for {
		n, err := b.catchUpPass(ctx)
		if err != nil {
			return err
		}
		if n <= b.opts.CatchUpEvents {
			return nil
		}
	}
}

// catchUpPass reads the stream from the generation's position to its end
// once, through the gate, and returns the records it read.
//
// Its batches feed what a worker of the generation's code version feeds:
// the new generation and, when the code version did not change, the live
// one, in the same transactions. So from the replay's end on, both
// generations receive every event the same way — the workers' and the
// rebuild's — and the new one is never ahead of the live one by what the
// rebuild read before lagging workers delivered it: the two differ only by
// the events up to the replay's end that the workers have not delivered
// yet, and are equal at every snapshot once they have (see
// verifyAndSwitch). The live generation meets the rebuild's events as
// redeliveries or early arrivals, which the gate makes harmless.
func (b *builder) catchUpPass(ctx context.Context) (int64, error) {
	var read int64
	var mu sync.Mutex // fn is called from one goroutine; Progress may read concurrently
	err := b.opts.Stream.Read(ctx, b.gen.Position, func(ctx context.Context, sb StreamBatch) error {
		if len(sb.Position) == 0 {
			return errors.New("the stream gave a batch without a position")
		}
		pos, at, n := sb.Position, sb.Time, sb.Read
		save := func(ctx context.Context, tx pgx.Tx) error {
			return b.env.Store.Generations.Advance(ctx, tx, b.gen.Key, pos, nullTime(at), n)
		}
		var err error
		if len(sb.Events)+len(sb.Rejects) > 0 {
			err = b.feed.Process(ctx, Batch{Events: sb.Events, Rejects: sb.Rejects, Source: "rebuild:" + b.gen.Key, BeforeCommit: save})
		} else {
			err = pgx.BeginFunc(ctx, b.env.Pool, func(tx pgx.Tx) error { return save(ctx, tx) })
		}
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		read += n
		b.phaseRead += n
		b.res.Events += n
		b.gen.Position, b.gen.PositionTime = pos, at
		b.report(false, "")
		return nil
	})
	if err != nil {
		return read, fmt.Errorf("catch-up: %w", err)
	}
	return read, nil
}

// nullTime returns nil for the zero time, for a NULL timestamp.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
