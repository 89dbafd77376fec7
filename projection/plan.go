package projection

import (
	"bytes"
	"sort"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/buffer"
)

// delivery is one valid event of a batch.
type delivery struct {
	idx  int // position in the batch
	ev   aggregate.Event
	id   string
	hash []byte
}

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
}

func (r record) same(id string, hash []byte) bool {
	return r.id == id && bytes.Equal(r.hash, hash)
}

// aggState is an aggregate's version row.
type aggState struct {
	version int64
	parked  int32
	blocked bool
	rev     int64
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
}

// planner classifies the deliveries of one projection.
type planner struct {
	outcomes  func(idx int, o Outcome)
	conflicts []conflict
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
	p := &aggPlan{agg: agg, before: st, qvers: qVersion}
	var parkedAt map[int64]int
	if len(parked) > 0 {
		parkedAt = make(map[int64]int, len(parked))
		for i := range parked {
			parkedAt[parked[i].Version] = i
		}
	}
	winners := make([]candidate, 0, len(ds))
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
				if known && ref.same(d.id, d.hash) {
					pl.outcomes(d.idx, Duplicate)
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
		if k, ok := parkedAt[v]; ok {
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
	cands := winners
	if len(parked) > 0 {
		cands = make([]candidate, 0, len(winners)+len(parked))
		cands = append(cands, winners...)
		for _, e := range parked {
			cands = append(cands, candidate{ev: e.Event, id: e.StableID(), hash: e.Hash, idx: -1, origin: fromParked})
		}
		sort.Slice(cands, func(a, b int) bool { return cands[a].ev.Version < cands[b].ev.Version })
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
