package projection

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// This file holds the order of an attempt's steps (attempt.go has its
// state): a transaction that takes the version rows (versions.go), plans
// every projection (plan.go), applies the plans (apply.go) and writes the
// gate's records (records.go), in the lock order txMode documents.

// run is the transaction's body.
func (a *attempt) run(ctx context.Context) error {
	p, bt := a.p, a.bt
	a.valid = bt.valid
	for _, d := range a.valid {
		clear(bt.results[d.idx].Projections) // a failed attempt's outcomes
		bt.results[d.idx].Err = nil
	}
	a.out.tally = make([]counts, len(p.projs))
	a.states = make([]map[string]aggState, len(p.projs))
	for i := range p.projs {
		a.states[i] = make(map[string]aggState, len(bt.aggs))
	}
	a.remember()
	if len(bt.aggs) > 0 {
		if err := a.gate(ctx); err != nil {
			return err
		}
		if a.mode.careful {
			a.out.states = p.forgetting(bt.aggs)
		}
	}
	return a.finish(ctx)
}

// gate runs the batch's valid deliveries through every projection's gate.
func (a *attempt) gate(ctx context.Context) error {
	p := a.p
	b := &pgx.Batch{}
	// First the check that the generations the batch feeds are still the
	// ones its registrations were chosen for (generations.go).
	p.queueFedCheck(b, a.bt.epoch)
	// Then the lease's check, or another writer's fence (owner.go).
	a.queueFence(b)
	// Plans made for one batch's arrays (often while the tables were still
	// empty) must not be reused for the next: a cached generic plan turns
	// index probes into scans as tables grow.
	b.Queue(`SET LOCAL plan_cache_mode = force_custom_plan`)
	if a.mode.careful {
		if err := a.tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("rebuild locks: %w", err)
		}
		return a.careful(ctx)
	}
	err := a.gatePlanned(ctx, b)
	if !errors.Is(err, errInlineMiss) || !a.mode.speculative && !a.hasFast() {
		return err
	}
	// An inline projection's fast path did not hold (or its handler failed
	// there): undo everything since the speculation began and take the
	// general path, in the same transaction. A deadlock there is counted
	// and logged like one that fails an attempt.
	if d, ok := asDeadlock(err); ok {
		p.deadlocked(ctx, a.bt, d, err, "deadlock on the fast path, taking the general path")
	}
	p.misspeculated.Add(1)
	a.out.misspeculated, a.out.continues = true, false
	a.mode.speculative, a.mode.mixed = false, false
	a.reset()
	// Alone: the statements of a pipeline are prepared before any runs,
	// and the transaction may be aborted until this one does.
	if _, err := a.tx.Exec(ctx, `ROLLBACK TO SAVEPOINT inorder_speculation`); err != nil {
		return fmt.Errorf("rollback to speculation: %w", err)
	}
	b = &pgx.Batch{}
	b.Queue(`RELEASE SAVEPOINT inorder_speculation`)
	return a.gatePlanned(ctx, b)
}

// gatePlanned takes the version rows (sending b first), plans, writes the
// version rows and applies the plans, for every projection.
func (a *attempt) gatePlanned(ctx context.Context, b *pgx.Batch) error {
	p := a.p
	if err := a.takeVersions(ctx, b); err != nil {
		return err
	}
	plans, conflicts, err := a.planAll(ctx)
	if err != nil {
		return err
	}
	if err := a.writeVersions(ctx, plans); err != nil {
		return err
	}
	for _, r := range p.projs {
		if err := a.apply(ctx, r, plans[r.index], conflicts[r.index]); err != nil {
			return err
		}
		out := a.outcome(r)
		for _, pl := range plans[r.index] {
			pl.settle(out)
		}
	}
	a.out.rows = rowUpdates(p, plans)
	a.out.states = a.stateNews(plans)
	return nil
}

// takeVersions sends b with the statements that take the version rows of
// every projection in the attempt's mode — written by speculation, locked,
// or read — and fills a.states.
func (a *attempt) takeVersions(ctx context.Context, b *pgx.Batch) error {
	p, bt := a.p, a.bt
	if !a.mode.speculative {
		if a.mode.mixed {
			var err error
			if b, err = a.preRead(ctx, b); err != nil {
				return err
			}
			if a.hasFast() {
				b.Queue(`SAVEPOINT inorder_speculation`)
				a.out.fastPath = true
			}
		}
		a.queueReads(b, a.mode.locked)
		if err := a.tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("read versions: %w", err)
		}
		if err := a.checkFresh(); err != nil {
			return err
		}
		a.matchRemembered()
		if bt.runs != nil {
			a.out.continues = continues(bt.runs, a.states)
		}
		return nil
	}
	b.Queue(`SAVEPOINT inorder_speculation`)
	written := make([]int64, len(p.projs))
	for _, r := range p.projs {
		if r.inlineTable() != nil {
			a.queueInlineSpeculation(b, r, &written[r.index])
			continue
		}
		if err := a.queueSpeculation(b, r, &written[r.index]); err != nil {
			return err
		}
	}
	a.queuePrelock(b)
	if err := a.tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("write versions: %w", err)
	}
	for _, n := range written {
		if n != int64(len(bt.runs)) {
			a.out.misspeculated = true
		}
	}
	if !a.out.misspeculated {
		a.out.continues, a.out.fastPath = true, true
		return nil
	}
	// Undo what was written and take the ordinary way.
	p.misspeculated.Add(1)
	a.mode.speculative = false
	b = &pgx.Batch{}
	b.Queue(`ROLLBACK TO SAVEPOINT inorder_speculation`)
	b.Queue(`RELEASE SAVEPOINT inorder_speculation`)
	for i := range a.states {
		clear(a.states[i])
	}
	clear(a.assumed)
	a.queueReads(b, a.mode.locked)
	if err := a.tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("read versions: %w", err)
	}
	a.matchRemembered()
	a.out.continues = continues(bt.runs, a.states)
	return nil
}

// finish records the batch's rejections and the attempt's, the source's
// checkpoint, and runs Batch.BeforeCommit: the last steps of the lock order.
func (a *attempt) finish(ctx context.Context) error {
	bt := a.bt
	b := &pgx.Batch{}
	rejected := bt.rejected
	if len(a.rejected) > 0 {
		rejected = dedupeRejections(append(append([]rejection(nil), bt.rejected...), a.rejected...))
	}
	if len(rejected) > 0 {
		a.p.queueRejected(b, rejected)
		var n int64 // deliveries found invalid before the gate
		for _, r := range bt.rejected {
			n += r.count
		}
		for i := range a.out.tally {
			a.out.tally[i].n[Rejected] += n
		}
	}
	if err := a.p.queueCheckpoints(b, bt.Checkpoint, bt.Checkpoints); err != nil {
		return err
	}
	if b.Len() > 0 {
		if err := a.tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("record rejections and checkpoint: %w", err)
		}
	}
	if bt.BeforeCommit == nil {
		return nil
	}
	if err := bt.BeforeCommit(ctx, a.tx); err != nil {
		return fmt.Errorf("before commit: %w", err)
	}
	return nil
}
