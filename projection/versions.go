package projection

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// This file holds the version rows: reading or locking them, writing them
// with a compare-and-set, and speculation, which writes them without
// reading them first.

// queueReads queues the reads of the version rows of the batch's
// aggregates, for every projection, into a.states; locked, it creates the
// missing rows and locks them all, in aggregate order, with one statement
// per projection.
//
// A processor with an inline projection locks every projection's version
// rows, and then, after every version row, the inline projections' own rows
// (see inline_gate.go): an optimistic read of another projection's version
// rows would leave their compare-and-set (writeVersions) for after those
// locks, out of the global lock order (see txMode).
func (a *attempt) queueReads(b *pgx.Batch, locked bool) {
	locked = locked || a.p.hasInline()
	for _, r := range a.p.projs {
		into := a.states[r.index]
		a.assumeFast(r)
		aggs := a.slowAggs(r)
		if !locked {
			aggs = a.assumeRemembered(r, aggs)
			if len(aggs) == 0 {
				continue
			}
		}
		a.p.store.Versions.QueueRead(b, r.key, aggs, locked).Query(func(rows pgx.Rows) error {
			return scanStates(rows, into)
		})
	}
	for _, r := range a.p.projs {
		if r.inlineTable() != nil {
			a.queueInlineLock(b, r, a.rowAggs(r))
		}
	}
}

// queueSpeculation queues the write that moves every aggregate of the
// batch's runs from the version before its run to its last version, for
// projection r, with the runs' applied-log entries, and fills the states
// the runs assume. *written receives the number of rows written as assumed
// (see store.Versions.QueueSpeculate).
func (a *attempt) queueSpeculation(b *pgx.Batch, r *registered, written *int64) error {
	runs, valid := a.bt.runs, a.bt.valid
	states := a.states[r.index]
	aggs := make([]string, len(runs))
	from, to := make([]int64, len(runs)), make([]int64, len(runs))
	var log logEntries
	for i, ru := range runs {
		states[ru.agg] = aggState{version: ru.first - 1}
		aggs[i], from[i], to[i] = ru.agg, ru.first-1, ru.last
		log.start()
		for k := ru.lo; k < ru.hi; k++ {
			// The first delivery of each version wins, as in planner.plan.
			if k == ru.lo || valid[k].ev.Version != valid[k-1].ev.Version {
				log.add(ru.agg, valid[k].ev.Version, valid[k].id, valid[k].hash)
			}
		}
	}
	log.done()
	if log.err != nil {
		return log.err
	}
	a.p.store.Versions.QueueSpeculate(b, r.key, aggs, from, to, log.args()).QueryRow(func(row pgx.Row) error {
		return row.Scan(written)
	})
	return nil
}

// writeVersions writes the planned state of every aggregate whose state
// changes, for every projection, before any handler runs: from here on the
// transaction holds those rows, so nothing it does next can race another
// writer. It fails with errContended if a row changed since it was read. A
// speculative attempt wrote its rows already.
func (a *attempt) writeVersions(ctx context.Context, plans [][]*aggPlan) error {
	if a.mode.speculative {
		for _, ps := range plans {
			for _, pl := range ps {
				pl.written = pl.after()
			}
		}
		return nil
	}
	b := &pgx.Batch{}
	checks := make([]func() error, 0, len(plans))
	for _, r := range a.p.projs {
		check, err := a.queueVersionWrite(b, r, plans[r.index])
		if err != nil {
			return err
		}
		if check != nil {
			checks = append(checks, check)
		}
		if check := a.queueMemoryCheck(b, r, plans[r.index]); check != nil {
			checks = append(checks, check)
		}
	}
	if b.Len() == 0 {
		return nil
	}
	if err := a.tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("write versions: %w", err)
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// queueVersionWrite queues the compare-and-set of the plans' new states for
// projection r, with their applied-log entries, and returns the check to
// run once it was sent (nil when nothing changes).
func (a *attempt) queueVersionWrite(b *pgx.Batch, r *registered, plans []*aggPlan) (func() error, error) {
	var aggs []string
	var vers, revs []int64
	var parked []int32
	var blocked []bool
	var log logEntries
	inline := r.inlineTable() != nil
	fast := a.fastAggs(r)
	for _, pl := range plans {
		next := pl.after()
		if _, ok := fast[pl.agg]; ok {
			pl.written = next // the projection's row carries it
			continue
		}
		if next == pl.before {
			continue
		}
		aggs, vers, parked, blocked = append(aggs, pl.agg), append(vers, next.version), append(parked, next.parked), append(blocked, next.blocked)
		revs = append(revs, pl.before.rev+1)
		pl.written = next
		log.start()
		if !inline { // an inline projection's row logs its runs
			for _, c := range pl.run {
				log.add(pl.agg, c.ev.Version, c.id, c.hash)
			}
		}
	}
	if len(aggs) == 0 {
		return nil, nil
	}
	log.done()
	if log.err != nil {
		return nil, log.err
	}
	var n int64
	a.p.store.Versions.QueueWrite(b, r.key, aggs, vers, parked, blocked, revs, log.args()).Exec(func(ct pgconn.CommandTag) error {
		n = ct.RowsAffected()
		return nil
	})
	locked := a.mode.locked
	assumed := a.assumedAny(r, aggs)
	return func() error {
		if n == int64(len(aggs)) {
			return nil
		}
		if locked {
			return fmt.Errorf("projection %s: wrote %d of %d locked version rows", r.name, n, len(aggs))
		}
		if assumed {
			return fmt.Errorf("%w: projection %s: wrote %d of %d version rows", errStaleMemory, r.name, n, len(aggs))
		}
		return errContended
	}, nil
}
