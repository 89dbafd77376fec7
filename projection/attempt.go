package projection

import (
	"github.com/jackc/pgx/v5"
)

// This file holds one attempt at a batch: the state of one transaction at
// it (what it read, assumed and set aside) and the outcomes it records. The
// steps of an attempt, which fill this state in the lock order txMode
// documents, are in the files that build on it.

// attempt is one transaction at a batch.
type attempt struct {
	p    *Processor
	tx   pgx.Tx
	bt   *batch
	mode txMode
	// valid are the deliveries the attempt gates: the batch's valid ones,
	// less those a careful attempt set aside as unstorable.
	valid []delivery
	// states holds, per projection, the version rows read, locked or
	// assumed (speculation), by aggregate.
	states []map[string]aggState
	// inline holds, per inline projection, the rows the general path
	// locked, by aggregate (see inline_gate.go).
	inline []map[string]inlineRow
	// fast holds, per inline projection, the aggregates a mixed attempt
	// takes by the fast path, with the version each run continues.
	fast []map[string]int64
	// rejected are rejections found by this attempt (unstorable
	// deliveries), recorded with the batch's.
	rejected []rejection
	// mem holds, per projection with version rows, what the processor
	// remembers of the batch's aggregates (statecache.go); assumed, the
	// ones whose version rows the attempt took from it instead of reading
	// them. noMemory: the batch's last attempt found the memory stale.
	mem      []map[string]aggMemory
	assumed  []map[string]aggMemory
	noMemory bool
	// known holds, per projection, the aggregates whose version rows, as
	// read or assumed, are as remembered: their parked events are the
	// remembered ones (knownParked).
	known []map[string]aggMemory
	// own is what the batch owns (owner.go): nil, or the leases it checks
	// and may drop guards under.
	own *ownership
	out txResult
}

// outcome returns the function that records the outcome of delivery idx for
// projection r.
func (a *attempt) outcome(r *registered) func(idx int, o Outcome) {
	return func(idx int, o Outcome) {
		a.bt.results[idx].Projections[r.index] = o
		a.out.tally[r.index].n[o]++
	}
}

// reset forgets the outcomes and states of a rolled-back pass.
func (a *attempt) reset() {
	for _, d := range a.valid {
		clear(a.bt.results[d.idx].Projections)
		a.bt.results[d.idx].Err = nil
	}
	clear(a.out.tally)
	for i := range a.states {
		clear(a.states[i])
	}
	a.inline, a.fast = nil, nil
	clear(a.assumed)
	clear(a.known)
}
