package projection

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"

	"github.com/inorder/inorder/aggregate"
)

// This file holds applying: calling a projection's handler with the runs
// its plans apply, at once or, carefully, aggregate by aggregate and event
// by event under savepoints.

// apply runs projection r's handler over the plans' runs and queues the
// gate's writes after the handler's statements, in one pipeline.
//
// An inline projection's handler is given its runs (Tx.InlineRuns); on the
// fast path (a speculative attempt, or a mixed one's fast aggregates) a
// handler that fails or a row its upsert did not write (not where the run
// continues it, or marked) is an errInlineMiss: the attempt takes the
// general path. On the general path, rows behind their aggregate's version
// catch up and marks are cleared first, and the gate's writes end with the
// rows' new marks (see Inline).
func (a *attempt) apply(ctx context.Context, r *registered, plans []*aggPlan, conflicts []conflict) error {
	ht := newTx(a.tx, r.name)
	r.enterSchema(ht)
	n := 0
	for _, pl := range plans {
		n += len(pl.run)
	}
	events := make([]aggregate.Event, 0, n)
	var entries [][]byte
	it := r.inlineTable()
	if it != nil {
		entries = make([][]byte, 0, n)
	}
	for _, pl := range plans {
		for _, c := range pl.run {
			events = append(events, c.ev)
			if it != nil {
				entries = append(entries, inlineEntry(c.ev.Aggregate, c.ev.Version, c.id, c.hash))
			}
		}
	}
	fast := it != nil && (a.mode.speculative || len(a.fastAggs(r)) > 0)
	if it != nil {
		ht.setInline(r, events, entries)
		if !a.mode.speculative {
			a.queueAlign(ht.batch, r, plans)
		}
	}
	// The handler goes first, so a read it starts with is not held back by
	// the gate's writes; those join the handler's queued statements.
	if err := a.p.callHandler(ctx, ht, r, events); err != nil {
		if fast {
			return fmt.Errorf("%w: handler: %w", errInlineMiss, err)
		}
		return &handlerFailure{projection: r.name, err: err}
	}
	ht.finish()
	a.queueWrites(ht.batch, r, plans, conflicts)
	r.leaveSchema(ht)
	if err := ht.Flush(ctx); err != nil {
		if fast {
			return fmt.Errorf("%w: %w", errInlineMiss, err)
		}
		return &handlerFailure{projection: r.name, err: err}
	}
	if err := ht.inlineShort(r.name); err != nil {
		if fast {
			return err
		}
		return &handlerFailure{projection: r.name, err: err}
	}
	return nil
}

// applyCarefully applies one aggregate's run under savepoints, cutting the
// run at the first event the handler fails on.
func (p *Processor) applyCarefully(ctx context.Context, tx pgx.Tx, r *registered, pl *aggPlan) error {
	if len(pl.run) == 0 {
		return nil
	}
	events := make([]aggregate.Event, len(pl.run))
	for k, c := range pl.run {
		events[k] = c.ev
	}
	herr, err := p.trySavepoint(ctx, tx, r, events)
	if err != nil || herr == nil {
		return err
	}
	for k := range events {
		herr, err := p.trySavepoint(ctx, tx, r, events[k:k+1])
		if err != nil {
			return err
		}
		if herr != nil {
			pl.cut, pl.err = k, herr
			p.log.ErrorContext(ctx, "quarantining event", "projection", r.name, "generation", r.generation, "aggregate", pl.agg, "version", events[k].Version, "error", herr)
			return nil
		}
	}
	return nil
}

// trySavepoint applies events under a savepoint. It returns the handler's
// error (rolled back to the savepoint), or a fatal error for the whole
// transaction (transient failures, cancellation).
func (p *Processor) trySavepoint(ctx context.Context, tx pgx.Tx, r *registered, events []aggregate.Event) (handlerErr, err error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("savepoint: %w", err)
	}
	ht := newTx(sp, r.name)
	r.enterSchema(ht)
	herr := p.callHandler(ctx, ht, r, events)
	if herr == nil {
		ht.finish()
		r.leaveSchema(ht)
		herr = ht.Flush(ctx)
	}
	if herr == nil {
		herr = ht.inlineShort(r.name)
	}
	if herr == nil {
		if err := sp.Commit(ctx); err != nil {
			return nil, fmt.Errorf("release savepoint: %w", err)
		}
		return nil, nil
	}
	if ctx.Err() != nil || IsTransient(herr) || tx.Conn().IsClosed() {
		return nil, herr
	}
	if err := sp.Rollback(ctx); err != nil {
		return nil, fmt.Errorf("rollback to savepoint: %w", err)
	}
	return herr, nil
}

// callHandler calls r's handler with events, all of which it applies.
func (p *Processor) callHandler(ctx context.Context, tx *Tx, r *registered, events []aggregate.Event) (err error) {
	if len(events) == 0 {
		return nil
	}
	ctx, span := p.childSpan(ctx, "inorder.handler", attribute.String("inorder.projection", r.name),
		attribute.Int("inorder.generation", r.generation), attribute.Int("inorder.events", len(events)))
	defer func() { endSpan(span, err) }()
	if tx.inline == nil && r.inlineTable() != nil {
		tx.setInline(r, events, nil)
	}
	if r.batch != nil {
		return r.batch.ApplyBatch(ctx, tx, events)
	}
	for i, e := range events {
		if tx.inline != nil {
			tx.inline.event = i
		}
		if err := r.event.Apply(ctx, tx, e); err != nil {
			return &HandlerError{Projection: r.name, Aggregate: e.Aggregate, Version: e.Version, Err: err}
		}
	}
	return nil
}
