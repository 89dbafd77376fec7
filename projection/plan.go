package projection

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/buffer"
)

// This file holds planning: what one attempt does with each aggregate of
// each projection, given its version row, its parked events, its
// quarantined event and the applied log of its stale versions.

// origin says where an event to apply comes from.
type origin uint8

const (
	fromBatch origin = iota
	fromParked
	fromQuarantine
)

// candidate is an event that may be applied or parked.
type candidate struct {
	ev     aggregate.Event
	id     string
	hash   []byte
	idx    int // delivery index, -1 unless from the batch
	origin origin
}

// record is what the database already holds for an (aggregate, version).
type record struct {
	state string // "applied", "parked", "quarantined", "delivery"
	id    string
	hash  []byte
	// entry, when set, is an inline row's log entry of the version (see
	// InlineEntry), which id and hash are unknown.
	entry []byte
	// loose marks a version older than every log (an inline row's log
	// keeps its last InlineTable.LogEntries versions): any delivery of it
	// counts as a duplicate, and as beyond the horizon (Counts).
	loose bool
}

// matches reports whether delivery d of agg's version v is the one r
// records.
func (r record) matches(agg string, v int64, d delivery) bool {
	switch {
	case r.loose:
		return true
	case r.entry != nil:
		return bytes.Equal(inlineEntry(agg, v, d.id, d.hash), r.entry)
	}
	return r.same(d.id, d.hash)
}

func (r record) same(id string, hash []byte) bool {
	return r.id == id && bytes.Equal(r.hash, hash)
}

// conflict is a delivery that reused a taken version.
type conflict struct {
	agg      string
	version  int64
	existing record
	incoming delivery
	count    int64
}

// aggPlan is what one transaction does to one aggregate of one projection.
type aggPlan struct {
	agg    string
	before aggState
	run    []candidate // the contiguous run from before.version+1
	park   []candidate // batch events beyond the run, not yet parked
	cut    int         // events of run actually applied (len(run) unless one failed)
	err    error       // the handler error of run[cut], when cut < len(run)
	qvers  int64       // version of the quarantined event, if blocked
	// attempts is added to a quarantined event's attempts; 0 means
	// Config.MaxAttempts.
	attempts int
	// written is the state casVersions wrote (the zero value if none).
	written aggState
	// parkedIn are the parked events the plan was made with; whole, that
	// they are all the aggregate's (see stateCache).
	parkedIn []buffer.Parked
	whole    bool
}

// planner classifies the deliveries of one projection.
type planner struct {
	outcomes  func(idx int, o Outcome)
	conflicts []conflict
	// beyond counts the deliveries counted as duplicates without a check:
	// versions older than every log (see InlineTable.LogEntries).
	beyond int64
	// plans and cands, when set, back the plans and their batch
	// candidates: one allocation each per attempt, not per aggregate.
	plans []aggPlan
	cands []candidate
}

func (pl *planner) conflict(agg string, v int64, existing record, d delivery) {
	for i := range pl.conflicts {
		c := &pl.conflicts[i]
		if c.agg == agg && c.version == v && c.incoming.id == d.id && bytes.Equal(c.incoming.hash, d.hash) {
			c.count++
			pl.outcomes(d.idx, Conflict)
			return
		}
	}
	pl.conflicts = append(pl.conflicts, conflict{agg: agg, version: v, existing: existing, incoming: d, count: 1})
	pl.outcomes(d.idx, Conflict)
}

// plan classifies the deliveries ds of one aggregate (sorted by version, then
// batch position) against its state st, its parked events, its quarantined
// event (when st.blocked) and the applied log of its stale versions.
func (pl *planner) plan(agg string, st aggState, ds []delivery, parked []buffer.Parked, quarantined *record, qVersion int64, applied map[int64]record) *aggPlan {
	var p *aggPlan
	if len(pl.plans) > 0 {
		p, pl.plans = &pl.plans[0], pl.plans[1:]
		*p = aggPlan{agg: agg, before: st, qvers: qVersion, parkedIn: parked}
	} else {
		p = &aggPlan{agg: agg, before: st, qvers: qVersion, parkedIn: parked}
	}
	// The parked event of a version: a scan of a few, a map of many.
	var parkedAt map[int64]int
	if len(parked) > 16 {
		parkedAt = make(map[int64]int, len(parked))
		for i := range parked {
			parkedAt[parked[i].Version] = i
		}
	}
	parkedOf := func(v int64) (int, bool) {
		if parkedAt != nil {
			k, ok := parkedAt[v]
			return k, ok
		}
		for i := range parked {
			if parked[i].Version == v {
				return i, true
			}
		}
		return 0, false
	}
	var winners []candidate
	if len(pl.cands) >= len(ds) {
		winners, pl.cands = pl.cands[:0:len(ds)], pl.cands[len(ds):]
	} else {
		winners = make([]candidate, 0, len(ds))
	}
	for i := 0; i < len(ds); {
		v := ds[i].ev.Version
		j := i
		for j < len(ds) && ds[j].ev.Version == v {
			j++
		}
		group := ds[i:j]
		i = j

		var ref record
		var known bool
		switch {
		case aggregate.Classify(st.version, v) == aggregate.Stale:
			ref, known = applied[v]
			if !known {
				// The version was skipped or declared missing by an operator:
				// the event turned up after all. Record it for the operator.
				ref = record{state: "skipped"}
			}
			for _, d := range group {
				if known && ref.matches(agg, v, d) {
					pl.outcomes(d.idx, Duplicate)
					if ref.loose {
						pl.beyond++
					}
				} else {
					pl.conflict(agg, v, ref, d)
				}
			}
			continue
		case st.blocked && v == qVersion && quarantined != nil:
			for _, d := range group {
				if quarantined.same(d.id, d.hash) {
					pl.outcomes(d.idx, Quarantined)
				} else {
					pl.conflict(agg, v, *quarantined, d)
				}
			}
			continue
		}
		if k, ok := parkedOf(v); ok {
			ref = record{state: "parked", id: parked[k].StableID(), hash: parked[k].Hash}
			for _, d := range group {
				if ref.same(d.id, d.hash) {
					pl.outcomes(d.idx, Duplicate)
				} else {
					pl.conflict(agg, v, ref, d)
				}
			}
			continue
		}
		w := group[0]
		winners = append(winners, candidate{ev: w.ev, id: w.id, hash: w.hash, idx: w.idx, origin: fromBatch})
		ref = record{state: "delivery", id: w.id, hash: w.hash}
		for _, d := range group[1:] {
			if ref.same(d.id, d.hash) {
				pl.outcomes(d.idx, Duplicate)
			} else {
				pl.conflict(agg, v, ref, d)
			}
		}
	}

	// Merge the batch's new versions with the parked ones and take the run
	// that follows the applied version. (The winners come in version order.)
	// Parked events join only a run the batch starts: unless the batch
	// has the next version, none can follow the applied one (a parked
	// event is never the next version of an aggregate that is not blocked).
	cands := winners
	if len(parked) > 0 && !st.blocked && len(winners) > 0 && winners[0].ev.Version == st.version+1 {
		cands = make([]candidate, 0, len(winners)+len(parked))
		cands = append(cands, winners...)
		for i := range parked {
			e := &parked[i]
			cands = append(cands, candidate{ev: e.Event, id: e.StableID(), hash: e.Hash, idx: -1, origin: fromParked})
		}
		slices.SortFunc(cands, func(a, b candidate) int { return cmp.Compare(a.ev.Version, b.ev.Version) })
	}
	n := 0
	if !st.blocked {
		for n < len(cands) && cands[n].ev.Version == st.version+int64(n)+1 {
			n++
		}
	}
	p.run = cands[:n]
	for _, c := range cands[n:] {
		if c.origin == fromBatch {
			p.park = append(p.park, c)
		}
	}
	p.cut = len(p.run)
	return p
}

// settle reports the outcome of every batch delivery of the plan, given how
// much of the run was applied (p.cut).
func (p *aggPlan) settle(outcome func(idx int, o Outcome)) {
	for k, c := range p.run {
		if c.origin != fromBatch {
			continue
		}
		switch {
		case k < p.cut:
			outcome(c.idx, Applied)
		case k == p.cut:
			outcome(c.idx, Quarantined)
		default:
			outcome(c.idx, Parked)
		}
	}
	for _, c := range p.park {
		outcome(c.idx, Parked)
	}
}

// after returns the aggregate's state once the plan is carried out, and the
// parked count delta.
func (p *aggPlan) after() aggState {
	st := p.before
	st.version += int64(p.cut)
	parked := int32(len(p.park))
	for k, c := range p.run {
		switch {
		case k < p.cut && c.origin == fromParked:
			parked--
		case k == p.cut && c.origin == fromParked:
			parked-- // moved to quarantine
		case k > p.cut && c.origin == fromBatch:
			parked++
		}
	}
	st.parked += parked
	if p.cut < len(p.run) {
		st.blocked = true
	} else if len(p.run) > 0 {
		st.blocked = false
	}
	return st
}
