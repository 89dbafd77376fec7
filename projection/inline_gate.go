package projection

import (
	"context"
	"errors"
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
//     and the attempt leaves the fast path) — step 2 of the lock order;
//  2. calls the handler, whose upsert of the projection's rows moves each
//     row from the version before its run only (InlineTable.Condition);
//  3. once the upsert holds the rows, reads the version rows of the
//     aggregates whose runs start after version 1: each must exist (every
//     aggregate that has a row has one: step 1, the general path and the
//     bulk build create them), with nothing parked, nothing quarantined and
//     a version no later than the one the run continues (an operator's
//     declared gap or skip moves that version only).
//
// The upsert writing fewer rows than the batch has runs, a version row
// failing the checks of 3, or the handler failing sends the whole attempt
// down the general path in the same transaction (rolled back to the
// speculation's savepoint). The checks of 3 are sound because every
// transaction that parks, quarantines or moves a version of an aggregate
// that has a row locks that row first (the general path locks the rows of
// every aggregate it takes, after their version rows): a transaction that
// did so before the upsert took the row has committed when 3 reads, and
// one that comes later waits for the upsert's transaction and then sees
// the row's new version. An aggregate without a row is guarded by its
// version row instead (1 and the general path both write it).
//
// The general path takes the version rows and then the projection's rows
// (SELECT … FOR UPDATE), in aggregate order; the aggregate's version is the
// later of the two (an operator's gap moves the version row only, and the
// row catches up — alignInline — before the handler applies the next run).
// A stale delivery is checked against the row's log, then against the
// applied table; older than both, it counts as a duplicate.

// errInlineMiss reports that an inline projection's fast path did not hold:
// the attempt takes the general path.
var errInlineMiss = errors.New("projection: inline fast path missed")

// inlineRow is an inline projection's row of an aggregate, as the general
// path locked it.
type inlineRow struct {
	version int64
	log     []byte
}

// inlineSQL are the gate's statements on an inline projection's table.
type inlineSQL struct {
	lock, align string
}

func newInlineSQL(t *InlineTable) inlineSQL {
	tbl := t.Table.Sanitize()
	k, v, l := pgx.Identifier{t.Key}.Sanitize(), pgx.Identifier{t.Version}.Sanitize(), pgx.Identifier{t.Log}.Sanitize()
	return inlineSQL{
		// lock locks the rows of $1 (sorted), one probe each.
		lock: `SELECT k.aggregate, t.version, t.log FROM unnest($1::text[]) AS k(aggregate)
CROSS JOIN LATERAL (SELECT ` + v + ` AS version, ` + l + ` AS log FROM ` + tbl + `
  WHERE ` + k + ` = k.aggregate OFFSET 0 FOR UPDATE) t`,
		// align moves rows the transaction holds up to the versions of $2
		// (an operator's gap); their logs stay (they hold no entries of
		// the versions skipped).
		align: `UPDATE ` + tbl + ` AS t SET ` + v + ` = k.version FROM unnest($1::text[], $2::bigint[]) AS k(aggregate, version)
WHERE t.` + k + ` = k.aggregate AND t.` + v + ` < k.version`,
	}
}

// queueInlineSpeculation queues the fast path's version-row work of inline
// projection r (step 1 above) and fills the states the runs assume.
// *written receives the runs taken as assumed so far: those of existing
// aggregates, which step 3 checks, and the new ones whose version rows
// were inserted.
func (a *attempt) queueInlineSpeculation(b *pgx.Batch, r *registered, written *int64) {
	states := a.states[r.index]
	var fresh []string
	for _, ru := range a.bt.runs {
		states[ru.agg] = aggState{version: ru.first - 1}
		if ru.first == 1 {
			fresh = append(fresh, ru.agg)
		}
	}
	existing := int64(len(a.bt.runs) - len(fresh))
	if len(fresh) == 0 {
		*written = existing
		return
	}
	b.Queue(a.p.sql.markVersions, r.key, fresh).QueryRow(func(row pgx.Row) error {
		var n int64
		err := row.Scan(&n)
		*written = existing + n
		return err
	})
}

// queueInlineCheck queues step 3 of the fast path for inline projection r
// and returns the check to run once it was sent.
func (a *attempt) queueInlineCheck(b *pgx.Batch, r *registered) func() error {
	var aggs []string
	var expected []int64
	for _, ru := range a.bt.runs {
		if ru.first > 1 {
			aggs, expected = append(aggs, ru.agg), append(expected, ru.first-1)
		}
	}
	if len(aggs) == 0 {
		return func() error { return nil }
	}
	var n int64
	b.Queue(a.p.sql.checkVersions, r.key, aggs, expected).QueryRow(func(row pgx.Row) error { return row.Scan(&n) })
	return func() error {
		if n != int64(len(aggs)) {
			return errInlineMiss
		}
		return nil
	}
}

// queueInlineLocks queues the locks of the rows of the batch's aggregates
// of every inline projection, which the general path takes after every
// version row, and merges them into the states.
func (a *attempt) queueInlineLocks(b *pgx.Batch, aggs []string) {
	for _, r := range a.p.projs {
		t := r.inlineTable()
		if t == nil {
			continue
		}
		a.queueInlineLock(b, r, t, aggs)
	}
}

// queueInlineLock queues the lock of inline projection r's rows of aggs.
func (a *attempt) queueInlineLock(b *pgx.Batch, r *registered, t *InlineTable, aggs []string) {
	if a.inline == nil {
		a.inline = make([]map[string]inlineRow, len(a.p.projs))
	}
	rows := make(map[string]inlineRow, len(aggs))
	a.inline[r.index] = rows
	states := a.states[r.index]
	b.Queue(newInlineSQL(t).lock, aggs).Query(func(rs pgx.Rows) error {
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

// queueAlign queues the catch-up of inline projection r's rows that stand
// behind their aggregate's version (an operator's gap) before plans apply
// runs to them.
func (a *attempt) queueAlign(b *pgx.Batch, r *registered, t *InlineTable, plans []*aggPlan) {
	rows := a.inlineRows(r)
	var aggs []string
	var vers []int64
	for _, pl := range plans {
		if row, ok := rows[pl.agg]; ok && len(pl.run) > 0 && row.version < pl.before.version {
			aggs, vers = append(aggs, pl.agg), append(vers, pl.before.version)
		}
	}
	if len(aggs) > 0 {
		b.Queue(newInlineSQL(t).align, aggs, vers)
	}
}

// inlineRows returns the rows the general path locked for projection r.
func (a *attempt) inlineRows(r *registered) map[string]inlineRow {
	if a.inline == nil {
		return nil
	}
	return a.inline[r.index]
}

// inlineApplied returns what inline projection r's row of agg logs of
// version v, a stale version: its entry, when the row's log covers v.
func inlineApplied(row inlineRow, v int64) (record, bool) {
	n := int64(len(row.log) / inlineEntrySize)
	if v > row.version || v <= row.version-n {
		return record{}, false
	}
	k := n - 1 - (row.version - v)
	return record{state: "applied", entry: row.log[k*inlineEntrySize : (k+1)*inlineEntrySize]}, true
}

// lockInlineOne locks inline projection r's row of agg for an operator
// action and returns its version (0 if it has none).
func lockInlineOne(ctx context.Context, tx pgx.Tx, t *InlineTable, agg string) (inlineRow, error) {
	var row inlineRow
	rows, err := tx.Query(ctx, newInlineSQL(t).lock, []string{agg})
	if err != nil {
		return row, fmt.Errorf("lock inline row: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var a string
		if err := rows.Scan(&a, &row.version, &row.log); err != nil {
			return row, fmt.Errorf("lock inline row: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return row, fmt.Errorf("lock inline row: %w", err)
	}
	return row, nil
}
