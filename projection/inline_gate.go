package projection

import (
	"bytes"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// This file holds the gate of inline projections (see Inline).
//
// The fast path is speculation (txMode.speculative) without a version row:
// for an inline projection the attempt assumes that every run of the batch
// continues its aggregate and
//
//  1. inserts an empty version row for each aggregate whose run starts at
//     version 1 (ON CONFLICT DO NOTHING: a row that exists, or that a
//     concurrent transaction is inserting, means the aggregate is not new,
//     and the attempt leaves the fast path) — step 2 of the lock order —
//     and counts the projection's rows of the others: each must have one
//     (the upsert's insert is not guarded by Condition; see
//     queueInlineSpeculation);
//  2. calls the handler, whose upsert of the projection's rows moves each
//     row only from the version before its run, and only if the row is not
//     marked (InlineTable.Condition).
//
// The upsert writing fewer rows than the batch has runs, or the handler
// failing, sends the whole attempt down the general path in the same
// transaction (rolled back to the speculation's savepoint).
//
// The mark is what keeps the fast path from advancing an aggregate past its
// parked or quarantined versions, or past a version an operator's gap or
// skip moved its version row to: a row is marked (a byte past its log's
// entries) exactly when its aggregate's version row holds something parked,
// a quarantined version, or a later version than the row. Every
// transaction that changes a version row of an aggregate that has a row
// holds that row's lock and, last, sets or clears the mark from the version
// row's final state (inlineSQL.mark: the general path, careful mode and the
// operator's actions, through queueWrites). The fast path changes no
// version row of an aggregate that has a row. An upsert that meets a row
// locked by such a transaction waits for it and then checks Condition on
// the row as that transaction left it. An aggregate without a row is
// guarded by its version row instead (1 and the general path both write
// it).
//
// The general path takes the version rows and then the projection's rows
// (SELECT … FOR UPDATE), in aggregate order; the aggregate's version is the
// later of the two. Before its handler applies runs to them, the rows are
// prepared (queueAlign): marks are cleared, and a row behind its version row
// (an operator's gap) catches up, logging a zero entry for each version
// skipped. A stale delivery is checked against the row's log, then against
// the applied table; older than both, it counts as a duplicate.
//
// A mixed attempt (txMode.mixed) first picks, from what the processor
// remembers of its commits (rowCache) or by reading the rows and version
// rows of the aggregates it does not know without locks (preRead), the
// aggregates whose runs continue their rows with nothing parked or
// quarantined, and takes only those by the fast path; it
// locks the version rows of the others (and inserts those of the new fast
// ones), then the rows of all but the new ones in one pass in aggregate
// order (the lock order; the pass reads no log from a fast aggregate's row
// that stands where its run expects). Its fast aggregates' rows keep their
// marks (a mark set since the pre-read makes the upsert miss); the others
// are prepared and marked as on the general path.

// queueInlineSpeculation queues the fast path's version-row work of inline
// projection r (step 1 above) and fills the states the runs assume.
// *written receives the runs taken as assumed so far: those of aggregates
// that have a row, which step 2 checks, and the new ones whose version rows
// were inserted.
//
// A run from a later version than 1 needs its aggregate's row to exist:
// Condition guards the upsert's update, not its insert, and an aggregate
// without a row has not had its version 1 applied (its later versions may
// have parked, or not come yet). A row, once written, stays while the
// batch runs (a rebuild's Reset runs under the rebuild lock, which every
// batch holds shared), so counting the rows without locks suffices; and the
// rows that the processor's own commits wrote need no count (rowCache).
func (a *attempt) queueInlineSpeculation(b *pgx.Batch, r *registered, written *int64) {
	states := a.states[r.index]
	var fresh, existing []string
	vouched := int64(0)
	a.p.rows.with(a.bt.epoch, a.p.pauseLock, func(rows rowsKnown) {
		for _, ru := range a.bt.runs {
			states[ru.agg] = aggState{version: ru.first - 1}
			switch {
			case ru.first == 1 && a.unguarded(r, ru.agg):
				vouched++ // an owner's: no guard (owner.go)
			case ru.first == 1:
				fresh = append(fresh, ru.agg)
			case rows.has(ru.agg, r.index):
				vouched++
			default:
				existing = append(existing, ru.agg)
			}
		}
	})
	*written = vouched
	count := func(row pgx.Row) error {
		var n int64
		err := row.Scan(&n)
		*written += n
		return err
	}
	if len(existing) > 0 {
		a.p.rowsCounted.Add(int64(len(existing)))
		b.Queue(r.inlineSQL().exist, existing).QueryRow(count)
	}
	if len(fresh) > 0 {
		a.p.store.Versions.QueueMark(b, r.key, fresh).QueryRow(count)
	}
}

// queuePrelock queues, for a speculative attempt of a processor in which an
// inline projection is not the first (see prelockInline), the locks of the
// rows of every inline projection that the batch's runs continue: step 3 of
// the lock order, after every version row and before any handler. Without
// them, the handlers of the projections before an inline one would write
// their rows (step 4) before its upsert took its rows (step 3).
//
// Batches alone would not deadlock there: every transaction that takes an
// inline row of an aggregate, but an operator's, holds the first
// projection's version row of it. An operator's action holds only its own
// projection's rows, and its Gap handler may write rows that other
// aggregates share.
func (a *attempt) queuePrelock(b *pgx.Batch) {
	if !a.p.prelockInline() {
		return
	}
	var aggs []string
	var expect []int64             // no log is read of a row where its run continues
	for _, ru := range a.bt.runs { // in aggregate order
		if ru.first > 1 {
			aggs, expect = append(aggs, ru.agg), append(expect, ru.first-1)
		}
	}
	if len(aggs) == 0 {
		return
	}
	for _, r := range a.p.projs {
		if t := r.inlineTable(); t != nil {
			b.Queue(r.inlineSQL().lock, aggs, expect)
		}
	}
}

// queueInlineLocks queues the locks of the rows of the batch's aggregates
// of every inline projection, which the general path takes after every
// version row, and merges them into the states.
func (a *attempt) queueInlineLocks(b *pgx.Batch, aggs []string) {
	for _, r := range a.p.projs {
		if r.inlineTable() != nil {
			a.queueInlineLock(b, r, aggs)
		}
	}
}

// queueInlineLock queues the lock of inline projection r's rows of aggs.
func (a *attempt) queueInlineLock(b *pgx.Batch, r *registered, aggs []string) {
	if a.inline == nil {
		a.inline = make([]map[string]inlineRow, len(a.p.projs))
	}
	rows := make(map[string]inlineRow, len(aggs))
	a.inline[r.index] = rows
	a.p.rowsLocked.Add(int64(len(aggs)))
	states := a.states[r.index]
	// The fast aggregates' logs are read only if their rows moved on
	// (checkFresh): their runs, then partly stale, are checked against them.
	fast := a.fastAggs(r)
	expect := make([]int64, len(aggs))
	for i, agg := range aggs {
		expect[i] = -1
		if e, ok := fast[agg]; ok && e > 0 {
			expect[i] = e
		}
	}
	b.Queue(r.inlineSQL().lock, aggs, expect).Query(func(rs pgx.Rows) error {
		for rs.Next() {
			var agg string
			var row inlineRow
			if err := rs.Scan(&agg, &row.version, &row.log); err != nil {
				return err
			}
			rows[agg] = row
			if st := states[agg]; row.version > st.version {
				st.version = row.version
				states[agg] = st
			}
		}
		return rs.Err()
	})
}

// queueAlign queues the preparation of inline projection r's rows that
// plans apply runs to (see prepared): a row that stands behind its
// aggregate's version (an operator's gap) catches up, and a marked row is
// cleared (inlineSQL.prepare).
func (a *attempt) queueAlign(b *pgx.Batch, r *registered, plans []*aggPlan) {
	rows := a.inlineRows(r)
	var aggs []string
	var vers []int64
	for _, pl := range plans {
		if row, ok := rows[pl.agg]; ok && a.prepared(r, pl, row) {
			aggs, vers = append(aggs, pl.agg), append(vers, pl.before.version)
		}
	}
	if len(aggs) > 0 {
		b.Queue(r.inlineSQL().prepare, aggs, vers)
	}
}

// prepared reports whether the attempt prepares inline projection r's row
// of pl's aggregate (which exists) before its handler applies pl's run: a
// row behind the aggregate's version or marked, unless the run is empty or
// the aggregate is one of a mixed attempt's fast ones, whose rows' marks are
// what keeps them off the fast path when they must be.
func (a *attempt) prepared(r *registered, pl *aggPlan, row inlineRow) bool {
	if _, fast := a.fastAggs(r)[pl.agg]; fast || len(pl.run) == 0 {
		return false
	}
	return row.version < pl.before.version || row.marked()
}

// markWrites returns the marks of inline projection r's rows that change
// once plans are carried out (see markChange), for queueWrites: none on a
// fast path, whose version rows the attempt did not touch.
func (a *attempt) markWrites(r *registered, plans []*aggPlan) (aggs []string, marks []bool) {
	if r.inlineTable() == nil || a.mode.speculative {
		return nil, nil
	}
	rows, fast := a.inlineRows(r), a.fastAggs(r)
	for _, pl := range plans {
		if _, ok := fast[pl.agg]; ok {
			continue
		}
		row, exists := rows[pl.agg]
		if mark, change := markChange(pl, row, exists, exists && a.prepared(r, pl, row)); change {
			aggs, marks = append(aggs, pl.agg), append(marks, mark)
		}
	}
	return aggs, marks
}

// markChange returns whether the inline row of pl's aggregate must be
// marked once pl is carried out — its version row then holds parked or
// quarantined versions, or a later version than the row — and whether that
// changes the row's mark. row is the row as the transaction locked it
// (exists: it had one), prepared whether its mark was cleared before the
// handler applied pl's run. A row the handler creates has no mark.
func markChange(pl *aggPlan, row inlineRow, exists, prepared bool) (mark, change bool) {
	after := pl.after()
	rowVersion := row.version
	switch {
	case pl.cut > 0:
		rowVersion = after.version // the handler wrote it, created it maybe
	case prepared:
		rowVersion = max(row.version, pl.before.version)
	case !exists:
		return false, false
	}
	marked := exists && row.marked() && !prepared
	mark = after.parked > 0 || after.blocked || after.version > rowVersion
	return mark, mark != marked
}

// inlineRows returns the rows the general path locked for projection r.
func (a *attempt) inlineRows(r *registered) map[string]inlineRow {
	if a.inline == nil {
		return nil
	}
	return a.inline[r.index]
}

// inlineGap is the entry of a version that an operator's gap skipped (the
// row caught up with it): no event's entry is all zero bytes but by a
// chance of 2^-64.
var inlineGap = make([]byte, inlineEntrySize)

// inlineApplied returns what inline projection r's row of agg logs of
// version v, a stale version: its entry, when the row's log covers v
// (logged), unless it is a version that an operator's gap skipped (gap).
func inlineApplied(row inlineRow, v int64) (rec record, logged, gap bool) {
	n := int64(len(row.log) / inlineEntrySize)
	if v > row.version || v <= row.version-n {
		return record{}, false, false
	}
	k := n - 1 - (row.version - v)
	entry := row.log[k*inlineEntrySize : (k+1)*inlineEntrySize]
	if bytes.Equal(entry, inlineGap) {
		return record{}, true, true
	}
	return record{state: "applied", entry: entry}, true, false
}

// lockInlineOne locks inline projection r's row of agg for an operator
// action and returns its version (0 if it has none).
func lockInlineOne(ctx context.Context, tx pgx.Tx, r *registered, agg string) (inlineRow, error) {
	var row inlineRow
	rows, err := tx.Query(ctx, r.inlineSQL().lock, []string{agg}, []int64{-1})
	if err != nil {
		return row, fmt.Errorf("lock inline row: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var a string
		if err := rows.Scan(&a, &row.version, &row.log); err != nil {
			return row, fmt.Errorf("lock inline row: %w", err)
		}
		row.found = true
	}
	if err := rows.Err(); err != nil {
		return row, fmt.Errorf("lock inline row: %w", err)
	}
	return row, nil
}

// hasInline reports whether any of p's projections is inline.
func (p *Processor) hasInline() bool {
	for _, r := range p.projs {
		if r.inlineTable() != nil {
			return true
		}
	}
	return false
}

// prelockInline reports whether a speculative attempt locks inline rows up
// front (queuePrelock): when an inline projection is not the first. The
// first projection's handler runs right after the version rows, so its
// upsert, which comes before its other writes (see Inline), takes its rows
// in step 3 of the lock order by itself.
func (p *Processor) prelockInline() bool {
	for i, r := range p.projs {
		if i > 0 && r.inlineTable() != nil {
			return true
		}
	}
	return false
}

// fastAggs returns the aggregates a mixed attempt takes by projection r's
// fast path, with the version each run continues (nil if none).
func (a *attempt) fastAggs(r *registered) map[string]int64 {
	if a.fast == nil {
		return nil
	}
	return a.fast[r.index]
}

// hasFast reports whether a mixed attempt takes any aggregate by a fast
// path.
func (a *attempt) hasFast() bool {
	for _, f := range a.fast {
		if len(f) > 0 {
			return true
		}
	}
	return false
}

// slowAggs returns the aggregates whose version rows projection r locks:
// all but its fast ones that are not new (the lock inserts the version
// rows of the new ones, as the fast path of new aggregates does).
func (a *attempt) slowAggs(r *registered) []string {
	fast := a.fastAggs(r)
	if len(fast) == 0 {
		return a.bt.aggs
	}
	out := make([]string, 0, len(a.bt.aggs))
	for _, agg := range a.bt.aggs {
		if e, ok := fast[agg]; !ok || e == 0 && !a.unguarded(r, agg) {
			out = append(out, agg)
		}
	}
	return out
}

// assumeFast fills the states of projection r's fast aggregates that are
// not new: their runs continue their rows' versions.
func (a *attempt) assumeFast(r *registered) {
	for agg, e := range a.fastAggs(r) {
		if e > 0 {
			a.states[r.index][agg] = aggState{version: e}
		}
	}
}

// rowAggs returns the aggregates whose rows inline projection r locks: all
// but its new fast ones (which have none). A mixed attempt locks the rows of
// its fast aggregates too, with the others, in one pass in aggregate order:
// its handler writes them all, and a row locked out of that order could
// deadlock with another transaction. An exclusive batch (Batch.Exclusive)
// has no other transaction to deadlock with: it locks none of its fast
// aggregates' rows, and leaves them to the handler's upsert, which checks
// each (InlineTable.Condition) as on the fast path — a row that moved or
// was marked meanwhile makes it miss, and the attempt takes the general
// path.
func (a *attempt) rowAggs(r *registered) []string {
	fast := a.fastAggs(r)
	if len(fast) == 0 {
		return a.bt.aggs
	}
	out := make([]string, 0, len(a.bt.aggs))
	for _, agg := range a.bt.aggs {
		if e, ok := fast[agg]; !ok || e > 0 && !a.bt.Exclusive {
			out = append(out, agg)
		}
	}
	return out
}

// checkFresh checks, after a mixed attempt took them, that nothing moved
// its fast aggregates since the pre-read. The version rows of the new ones
// must be empty, else the attempt takes the general path. The rows of the
// others may have moved on (another transaction applied versions of them
// meanwhile: competing consumers): they are held now, so their aggregates
// stay on the fast path from where the rows stand — the versions the
// others applied are stale here, checked against the rows' logs — and their
// rows' marks cover their version rows as before. An exclusive batch did
// not take them (see rowAggs): the upsert checks them.
func (a *attempt) checkFresh() error {
	for i, fast := range a.fast {
		rows := a.inlineRows(a.p.projs[i])
		for agg, e := range fast {
			if e == 0 && a.states[i][agg] != (aggState{}) {
				return fmt.Errorf("%w: aggregate %s is not new any more", errInlineMiss, agg)
			}
			row, held := rows[agg]
			if v := row.version; held && e > 0 && v != e {
				if v < e { // rows never move back: not the row read
					return fmt.Errorf("%w: aggregate %s's row is at %d, not %d", errInlineMiss, agg, v, e)
				}
				fast[agg] = v
				a.states[i][agg] = aggState{version: v}
			}
		}
	}
	return nil
}

// preRead picks, for every inline projection, the aggregates a mixed
// attempt takes by the fast path (a.fast): those whose deliveries form a
// run that continues the row's version, the row unmarked (nothing parked
// or quarantined, no later version in the version row) — or that are new
// (no row, no version row) with a run from version 1. It takes them from
// what the processor remembers of its rows (rowCache), guessing that an
// aggregate it does not know is new when its run starts at version 1, and
// reads the others' rows and marks (and the version rows of aggregates
// without a row) without locks. It returns b, sent if it read (the caller
// queues on the batch it gets back).
func (a *attempt) preRead(ctx context.Context, b *pgx.Batch) (*pgx.Batch, error) {
	runs := aggRuns(a.valid)
	a.fast = make([]map[string]int64, len(a.p.projs))
	read := false
	for _, r := range a.p.projs {
		t := r.inlineTable()
		if t == nil {
			continue
		}
		fast := map[string]int64{}
		a.fast[r.index] = fast
		var unknown []string
		a.p.rows.with(a.bt.epoch, a.p.pauseLock, func(known rowsKnown) {
			for _, agg := range a.bt.aggs {
				ru, ok := runs[agg]
				if !ok {
					continue // a gap: the general path
				}
				st, remembered := known.get(agg, r.index)
				switch {
				case !known.known, !remembered && ru.first > 1:
					unknown = append(unknown, agg)
				case !remembered:
					fast[agg] = 0
				case st.written && st.clean && st.version == ru.first-1:
					fast[agg] = st.version
				}
			}
		})
		if len(unknown) == 0 {
			continue
		}
		read = true
		a.p.store.Versions.QueueInlineStates(b, r.key, t.ref(), inlineEntrySize, unknown).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var agg string
				var tv, vv *int64
				var marked *bool
				if err := rows.Scan(&agg, &tv, &marked, &vv); err != nil {
					return err
				}
				ru := runs[agg]
				switch {
				case tv == nil && vv == nil && ru.first == 1:
					fast[agg] = 0
				case tv != nil && *tv == ru.first-1 && !*marked:
					fast[agg] = ru.first - 1
				}
			}
			return rows.Err()
		})
	}
	if !read {
		return b, nil
	}
	if err := a.tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("read inline rows: %w", err)
	}
	return &pgx.Batch{}, nil
}

// aggRuns returns the runs of the aggregates whose deliveries in valid
// (sorted by aggregate and version) form one: every version from the first
// to the last, duplicates allowed.
func aggRuns(valid []delivery) map[string]run {
	runs := map[string]run{}
	for i := 0; i < len(valid); {
		agg := valid[i].ev.Aggregate
		ru := run{agg: agg, first: valid[i].ev.Version, last: valid[i].ev.Version, lo: i}
		ok := true
		j := i + 1
		for ; j < len(valid) && valid[j].ev.Aggregate == agg; j++ {
			switch v := valid[j].ev.Version; v {
			case ru.last:
			case ru.last + 1:
				ru.last = v
			default:
				ok = false
			}
		}
		ru.hi = j
		if ok {
			runs[agg] = ru
		}
		i = j
	}
	return runs
}
