package projection

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/buffer"
)

// This file holds the planner's loading: what an attempt reads for each
// projection beyond its version rows (parked events, quarantined events, the
// applied log of stale versions) before the planner (plan.go) classifies its
// deliveries.

// planAll plans every projection of the attempt (plan), in the order of
// the processor's projections: their plans and the conflicts found, by
// projection index.
func (a *attempt) planAll(ctx context.Context) ([][]*aggPlan, [][]conflict, error) {
	plans := make([][]*aggPlan, len(a.p.projs))
	conflicts := make([][]conflict, len(a.p.projs))
	for _, r := range a.p.projs {
		var err error
		if plans[r.index], conflicts[r.index], err = a.plan(ctx, r); err != nil {
			return nil, nil, err
		}
	}
	return plans, conflicts, nil
}

// plan loads what the version rows call for (parked events, quarantined
// events, the applied log of stale versions) and classifies the attempt's
// deliveries for projection r: one plan per aggregate, and the conflicts.
func (a *attempt) plan(ctx context.Context, r *registered) ([]*aggPlan, []conflict, error) {
	valid, states := a.valid, a.states[r.index]
	outcome := a.outcome(r)
	n := a.needs(r)
	gs, err := a.load(ctx, r, n)
	if err != nil {
		return nil, nil, err
	}
	pl := &planner{outcomes: outcome, plans: make([]aggPlan, n.aggs), cands: make([]candidate, len(valid))}
	plans := make([]*aggPlan, 0, len(pl.plans))
	mem := a.knownParked(r)
	for i := 0; i < len(valid); {
		agg := valid[i].ev.Aggregate
		j := i
		for j < len(valid) && valid[j].ev.Aggregate == agg {
			j++
		}
		var qrec *record
		q, blocked := gs.quarantined[agg]
		if blocked {
			qrec = &q.rec
		}
		st, parked, whole := states[agg], gs.parked[agg], gs.whole[agg]
		if m, ok := mem[agg]; ok && m.whole {
			parked, whole = m.parked, true
		}
		p := pl.plan(agg, st, valid[i:j], parked, qrec, q.version, gs.applied[agg])
		p.whole = whole || st.parked == 0
		plans = append(plans, p)
		i = j
	}
	a.out.tally[r.index].beyond += pl.beyond
	return plans, pl.conflicts, nil
}

// gateNeeds is what a batch needs to know beyond the version rows: all
// parked events of an aggregate the batch can advance (its next version is
// in the batch); only the id and hash of parked versions the batch
// redelivers otherwise; the quarantined event of a blocked aggregate; the
// applied log of stale versions.
type gateNeeds struct {
	parkedAggs, probeAggs, blockedAggs, staleAggs []string
	probeVers, staleVers                          []int64
	aggs                                          int // the aggregates: the plans to make
}

// gateState is what load read for gateNeeds, by aggregate.
type gateState struct {
	parked map[string][]buffer.Parked
	// whole marks the aggregates whose parked events were all read.
	whole       map[string]bool
	quarantined map[string]quarantineRef
	applied     map[string]map[int64]record
}

// needs returns what the attempt's valid deliveries for r need beyond their
// version rows (a.states).
func (a *attempt) needs(r *registered) gateNeeds {
	valid, states := a.valid, a.states[r.index]
	mem := a.knownParked(r) // aggregates whose parked events the memory may hold
	var n gateNeeds
	for i := 0; i < len(valid); {
		n.aggs++
		agg := valid[i].ev.Aggregate
		st := states[agg]
		j := i
		advances := false
		for j < len(valid) && valid[j].ev.Aggregate == agg {
			advances = advances || valid[j].ev.Version == st.version+1
			j++
		}
		if st.blocked {
			n.blockedAggs = append(n.blockedAggs, agg)
		}
		if m, ok := mem[agg]; ok && m.whole {
			// The memory holds them all.
			for k := i; k < j; k++ {
				if d := valid[k]; d.ev.Version <= st.version && (k == i || valid[k-1].ev.Version != d.ev.Version) {
					n.staleAggs, n.staleVers = append(n.staleAggs, agg), append(n.staleVers, d.ev.Version)
				}
			}
			i = j
			continue
		}
		if st.parked > 0 && advances && !st.blocked {
			n.parkedAggs = append(n.parkedAggs, agg)
		}
		for k := i; k < j; k++ {
			d := valid[k]
			if k > i && valid[k-1].ev.Version == d.ev.Version {
				continue
			}
			switch {
			case d.ev.Version <= st.version:
				n.staleAggs, n.staleVers = append(n.staleAggs, agg), append(n.staleVers, d.ev.Version)
			case st.parked > 0 && (!advances || st.blocked) && d.ev.Version > st.version+1:
				n.probeAggs, n.probeVers = append(n.probeAggs, agg), append(n.probeVers, d.ev.Version)
			}
		}
		i = j
	}
	return n
}

// load reads what n asks for, in one round trip of the attempt's
// transaction; an inline projection's stale versions come from its rows'
// logs first.
func (a *attempt) load(ctx context.Context, r *registered, n gateNeeds) (gateState, error) {
	p, tx := a.p, a.tx
	gs := gateState{parked: map[string][]buffer.Parked{}, whole: map[string]bool{}, quarantined: map[string]quarantineRef{}, applied: map[string]map[int64]record{}}
	parked, quarantined, applied := gs.parked, gs.quarantined, gs.applied
	parkedAggs, probeAggs, blockedAggs, staleAggs := n.parkedAggs, n.probeAggs, n.blockedAggs, n.staleAggs
	probeVers, staleVers := n.probeVers, n.staleVers
	batch := &pgx.Batch{}
	for _, agg := range parkedAggs {
		gs.whole[agg] = true
	}
	if len(parkedAggs) > 0 {
		p.buf.QueueLoad(batch, r.key, parkedAggs, func(ps []buffer.Parked) {
			for _, e := range ps {
				parked[e.Aggregate] = append(parked[e.Aggregate], e)
			}
		})
	}
	if len(probeAggs) > 0 {
		p.buf.QueueLoadKeys(batch, r.key, probeAggs, probeVers, func(ps []buffer.Parked) {
			for _, e := range ps {
				parked[e.Aggregate] = append(parked[e.Aggregate], e)
			}
		})
	}
	if len(blockedAggs) > 0 {
		p.store.Quarantine.QueueLoadRefs(batch, r.key, blockedAggs).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var agg string
				var q quarantineRef
				if err := rows.Scan(&agg, &q.version, &q.rec.id, &q.rec.hash); err != nil {
					return err
				}
				q.rec.state = "quarantined"
				quarantined[agg] = q
			}
			return rows.Err()
		})
	}
	inline := r.inlineTable() != nil
	if inline && len(staleAggs) > 0 {
		// The row's log first; what it does not cover, from the applied
		// table (operators' records), else older than both (loose).
		rows := a.inlineRows(r)
		var restAggs []string
		var restVers []int64
		for k, agg := range staleAggs {
			v := staleVers[k]
			row := rows[agg]
			rec, logged, gap := inlineApplied(row, v)
			switch {
			case logged && !gap:
				if applied[agg] == nil {
					applied[agg] = map[int64]record{}
				}
				applied[agg][v] = rec
				continue
			case !logged && v <= row.version:
				if applied[agg] == nil {
					applied[agg] = map[int64]record{}
				}
				applied[agg][v] = record{state: "applied", loose: true}
			}
			// Skipped by an operator, or not logged: the applied table.
			restAggs, restVers = append(restAggs, agg), append(restVers, v)
		}
		staleAggs, staleVers = restAggs, restVers
	}
	if len(staleAggs) > 0 {
		p.store.Applied.QueueLoad(batch, r.key, staleAggs, staleVers, !inline).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var agg string
				var v int64
				rec := record{state: "applied"}
				if err := rows.Scan(&agg, &v, &rec.id, &rec.hash); err != nil {
					return err
				}
				if applied[agg] == nil {
					applied[agg] = map[int64]record{}
				}
				applied[agg][v] = rec
			}
			return rows.Err()
		})
	}
	if batch.Len() > 0 {
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return gs, fmt.Errorf("projection %s: load gate state: %w", r.name, err)
		}
	}
	return gs, nil
}

type quarantineRef struct {
	version int64
	rec     record
}
