package projection

import "sync"

// This file holds what a processor remembers of the inline rows its own
// commits wrote.
//
// Speculation needs every aggregate whose run starts after version 1 to
// have its row (queueInlineSpeculation): it counts them, about a tenth of
// an in-order batch's server time. A row that this processor's commit
// wrote still exists: rows are removed only by a rebuild in place, whose
// Reset runs under the projection's rebuild lock in a transaction that
// changes the generation epoch. A batch holds the rebuild locks shared and
// then checks that the epoch is the one its view was loaded in; the memory
// holds the rows written by commits of that same epoch (the epoch only
// grows): so the batch needs no count for them. Processors without both —
// those that feed a fixed set of generations — count every row.

// rowCache is the set of aggregates whose rows, per inline projection, a
// processor's commits wrote in one generation epoch. Safe for concurrent
// use; the zero value is empty.
type rowCache struct {
	mu    sync.Mutex
	epoch int64             // of the commits that wrote the rows
	m     map[string]uint64 // projections (bit by index, below 64) by aggregate
}

// rowCacheSize bounds the aggregates a processor remembers: at the bound it
// forgets them all (about 50 bytes each).
const rowCacheSize = 1 << 18

// add records the rows a committed attempt of a batch of epoch wrote.
func (c *rowCache) add(epoch int64, wrote map[string]uint64) {
	if len(wrote) == 0 || epoch == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || epoch != c.epoch || len(c.m)+len(wrote) > rowCacheSize {
		c.m, c.epoch = make(map[string]uint64, len(wrote)), epoch
	}
	for agg, bits := range wrote {
		c.m[agg] |= bits
	}
}

// vouching returns the rows a batch of epoch may take as written: none
// unless it checks its epoch after taking the rebuild locks (epoch > 0,
// pauseLock).
func (c *rowCache) vouching(epoch int64, pauseLock bool) rowsVouched {
	if epoch == 0 || !pauseLock {
		return rowsVouched{}
	}
	return rowsVouched{c: c, epoch: epoch}
}

// rowsVouched answers whether a row was written, for a batch of epoch.
type rowsVouched struct {
	c     *rowCache
	epoch int64
}

// has reports whether the row of agg in the projection of index i was
// written by the processor's commits in the batch's epoch.
func (v rowsVouched) has(agg string, i int) bool {
	if v.c == nil || i >= 64 {
		return false
	}
	v.c.mu.Lock()
	defer v.c.mu.Unlock()
	return v.c.epoch == v.epoch && v.c.m[agg]&(1<<i) != 0
}

// inlineWrites returns, for the plans of an attempt, the aggregates whose
// rows the handlers of the processor's inline projections wrote: those
// whose runs they applied (Tx.QueueInline counted the rows).
func inlineWrites(p *Processor, plans [][]*aggPlan) map[string]uint64 {
	var out map[string]uint64
	for _, r := range p.projs {
		if r.index >= 64 || r.inlineTable() == nil {
			continue
		}
		for _, pl := range plans[r.index] {
			if pl.cut == 0 {
				continue
			}
			if out == nil {
				out = make(map[string]uint64, len(plans[r.index]))
			}
			out[pl.agg] |= 1 << r.index
		}
	}
	return out
}
