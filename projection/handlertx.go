package projection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
)

// This file holds Apply: a projection's handler run on a transaction of the
// caller's, without a Processor.

// Apply runs p's handler on tx, without a Processor and without the gate:
// to test a handler against a real database, or to reuse it in a
// hand-written consumer (a set-based baseline, a one-off backfill).
//
// The events are sorted by aggregate and, within an aggregate, by version
// (a stable sort of a copy), as the gate hands them; a BatchHandler gets
// them in one ApplyBatch call, an EventHandler one Apply call each. Apply
// checks nothing else: duplicates, gaps and stale versions reach the
// handler as given, no version row is read or written and nothing is
// parked — that is the gate's job. An inline projection's handler runs as
// it would outside the gate's fast path (Tx.InlineRuns returns nil). The
// statements the handler queued are sent before Apply returns; tx is
// neither committed nor rolled back.
//
// It fails with an error wrapping ErrNoHandler if p implements neither
// BatchHandler nor EventHandler, and with the handler's or the database's
// error otherwise.
func Apply(ctx context.Context, tx pgx.Tx, p Projection, events ...aggregate.Event) error {
	es := slices.Clone(events)
	slices.SortStableFunc(es, func(a, b aggregate.Event) int {
		return cmp.Or(cmp.Compare(a.Aggregate, b.Aggregate), cmp.Compare(a.Version, b.Version))
	})
	t := newTx(tx, p.Name())
	switch h := p.(type) {
	case BatchHandler:
		if len(es) > 0 {
			if err := h.ApplyBatch(ctx, t, es); err != nil {
				return fmt.Errorf("projection %s: apply batch: %w", p.Name(), err)
			}
		}
	case EventHandler:
		for _, e := range es {
			if err := h.Apply(ctx, t, e); err != nil {
				return fmt.Errorf("projection %s: apply %s v%d: %w", p.Name(), e.Aggregate, e.Version, err)
			}
		}
	default:
		return fmt.Errorf("projection %s: %w", p.Name(), ErrNoHandler)
	}
	t.finish()
	if err := t.Flush(ctx); err != nil {
		return fmt.Errorf("projection %s: %w", p.Name(), err)
	}
	return nil
}

// ErrNoHandler is returned by Apply for a projection that implements
// neither BatchHandler nor EventHandler.
var ErrNoHandler = errors.New("projection implements neither BatchHandler nor EventHandler")
