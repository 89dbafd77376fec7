package projection

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// This file holds careful mode: the attempt that isolates what fails. It
// locks every version row up front, in the global lock order, then writes
// and applies aggregate by aggregate under savepoints. A handler that fails
// on an event has that event quarantined (the run is cut there, and the
// aggregate's later versions park behind it); a write the database refuses
// sets the aggregate's deliveries aside as rejected, with an
// *UnstorableError. Everything else in the batch commits.

// careful is the gate of a careful attempt.
func (a *attempt) careful(ctx context.Context) error {
	p := a.p
	unstorable := map[string]error{}
	for _, r := range p.projs {
		if err := a.lockCarefully(ctx, r, unstorable); err != nil {
			return err
		}
	}
	for agg, err := range unstorable {
		for _, r := range p.projs {
			a.setAside(r, agg, err, nil)
		}
	}
	aggs := a.bt.aggs
	if len(unstorable) > 0 {
		a.valid = slices.DeleteFunc(slices.Clone(a.valid), func(d delivery) bool { return unstorable[d.ev.Aggregate] != nil })
		aggs = slices.DeleteFunc(slices.Clone(aggs), func(agg string) bool { return unstorable[agg] != nil })
	}
	// Inline projections' own rows, after every version row.
	if b := (&pgx.Batch{}); len(aggs) > 0 {
		a.queueInlineLocks(b, aggs)
		if b.Len() > 0 {
			if err := a.tx.SendBatch(ctx, b).Close(); err != nil {
				return fmt.Errorf("lock inline rows: %w", err)
			}
		}
	}
	plans, conflicts, err := a.planAll(ctx)
	if err != nil {
		return err
	}
	for _, r := range p.projs {
		out := a.outcome(r)
		byAgg := map[string][]conflict{}
		for _, c := range conflicts[r.index] {
			byAgg[c.agg] = append(byAgg[c.agg], c)
		}
		for _, pl := range plans[r.index] {
			err := a.applyAggregate(ctx, r, pl, byAgg[pl.agg])
			switch {
			case err == nil:
				pl.settle(out)
			case isRefusal(err):
				p.log.ErrorContext(ctx, "database refused to store an aggregate's deliveries; they are set aside as rejected",
					"projection", r.name, "aggregate", pl.agg, "error", err)
				a.setAside(r, pl.agg, err, pl)
			default:
				return err
			}
		}
	}
	return nil
}

// lockCarefully creates and locks projection r's version rows of the
// attempt's aggregates, less those already found unstorable: with one
// statement if the database accepts it, else one aggregate at a time,
// adding those it refuses to unstorable.
func (a *attempt) lockCarefully(ctx context.Context, r *registered, unstorable map[string]error) error {
	aggs := a.bt.aggs
	if len(unstorable) > 0 {
		aggs = slices.DeleteFunc(slices.Clone(aggs), func(agg string) bool { return unstorable[agg] != nil })
	}
	err := a.lockUnder(ctx, r, aggs)
	if err == nil || !isRefusal(err) {
		return err
	}
	for _, agg := range aggs {
		err := a.lockUnder(ctx, r, []string{agg})
		switch {
		case err == nil:
		case isRefusal(err):
			unstorable[agg] = err
		default:
			return err
		}
	}
	return nil
}

// lockUnder locks projection r's version rows of aggs under a savepoint,
// which it rolls back if the statement fails.
func (a *attempt) lockUnder(ctx context.Context, r *registered, aggs []string) error {
	if len(aggs) == 0 {
		return nil
	}
	return a.savepoint(ctx, func(tx pgx.Tx) error {
		rows, err := a.p.store.Versions.Lock(ctx, tx, r.key, aggs)
		if err != nil {
			return err
		}
		defer rows.Close()
		return scanStates(rows, a.states[r.index])
	})
}

// applyAggregate writes one aggregate's plan for projection r — its version
// row, its run through the handler (carefully), the gate's rows — under a
// savepoint, which it rolls back if anything fails.
func (a *attempt) applyAggregate(ctx context.Context, r *registered, pl *aggPlan, conflicts []conflict) error {
	return a.savepoint(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		check, err := a.queueVersionWrite(b, r, []*aggPlan{pl})
		if err != nil {
			return err
		}
		if r.inlineTable() != nil {
			a.queueAlign(b, r, []*aggPlan{pl})
		}
		if b.Len() > 0 {
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return fmt.Errorf("write version: %w", err)
			}
			if err := check(); err != nil {
				return err
			}
		}
		if err := a.p.applyCarefully(ctx, tx, r, pl); err != nil {
			return err
		}
		wb := &pgx.Batch{}
		a.queueWrites(wb, r, []*aggPlan{pl}, conflicts)
		if wb.Len() == 0 {
			return nil
		}
		return tx.SendBatch(ctx, wb).Close()
	})
}

// savepoint runs fn in a savepoint of the attempt's transaction: released
// if fn succeeds, rolled back otherwise.
func (a *attempt) savepoint(ctx context.Context, fn func(tx pgx.Tx) error) error {
	sp, err := a.tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if err := fn(sp); err != nil {
		if rerr := sp.Rollback(ctx); rerr != nil {
			return errors.Join(err, fmt.Errorf("rollback to savepoint: %w", rerr))
		}
		return err
	}
	if err := sp.Commit(ctx); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}

// setAside marks the attempt's deliveries of agg rejected in projection r,
// because the database refused to store them (err), and records them as
// rejected. pl, when the aggregate was planned, has its outcomes undone
// first.
func (a *attempt) setAside(r *registered, agg string, err error, pl *aggPlan) {
	bt := a.bt
	tally := &a.out.tally[r.index]
	for _, d := range a.valid {
		if d.ev.Aggregate != agg {
			continue
		}
		res := &bt.results[d.idx]
		if prev := res.Projections[r.index]; prev != 0 {
			tally.n[prev]-- // the outcome the plan gave it
		}
		uerr := &UnstorableError{Projection: r.name, Aggregate: agg, Version: d.ev.Version, Err: err}
		res.Projections[r.index] = Rejected
		res.Err = uerr
		tally.n[Rejected]++
		a.rejected = append(a.rejected, newRejection(bt.Source, d.ev, uerr))
	}
	if pl != nil {
		pl.run, pl.park, pl.cut = nil, nil, 0
	}
}
