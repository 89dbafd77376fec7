package projection

import "sync"

// This file holds what a processor remembers of the inline rows its own
// commits wrote: that they exist, and where they stood after its last
// commit that touched them.
//
// Speculation needs every aggregate whose run starts after version 1 to
// have its row (queueInlineSpeculation): it counts them, about 7% of an
// in-order batch's server time (docs/benchmarks.md). A row that this processor's commit
// wrote still exists: rows are removed only by a rebuild in place, whose
// Reset runs under the projection's rebuild lock in a transaction that
// changes the generation epoch. A batch holds the rebuild locks shared and
// then checks that the epoch is the one its view was loaded in; the memory
// holds the rows written by commits of that same epoch (the epoch only
// grows): so the batch needs no count for them. Processors without both —
// those that feed a fixed set of generations — count every row.
//
// A mixed attempt picks its fast aggregates from the same memory: an
// aggregate whose run continues the version its row was left at, clean
// (nothing parked or quarantined, the row caught up). That is a guess, as
// the unlocked pre-read it replaces was: the attempt checks its fast
// aggregates once it holds their rows (checkFresh) and their upsert checks
// the rest (Condition). Only the aggregates the memory does not know are
// pre-read.

// rowCache remembers, per aggregate and inline projection, the row a
// processor's commits wrote in one generation epoch. Safe for concurrent
// use; the zero value is empty.
type rowCache struct {
	mu    sync.Mutex
	epoch int64                 // of the commits remembered
	m     map[string][]rowState // by aggregate, then projection index
}

// rowState is what a processor remembers of an inline row.
type rowState struct {
	version int64 // after the last commit that applied to it (written)
	written bool  // a commit of the processor wrote the row: it exists
	clean   bool  // the last commit left it at version, unmarked
}

// rowCacheSize bounds the aggregates a processor remembers: at the bound it
// forgets them all (about 100 bytes each).
const rowCacheSize = 1 << 17

// rowNews is what one committed attempt tells the cache, by aggregate and
// projection index (see rowUpdates).
type rowNews map[string][]rowNew

// rowNew is one aggregate's news for one projection.
type rowNew struct {
	kind    int8 // rowSame, rowApplied, rowDirty
	version int64
	clean   bool
}

// Kinds of rowNew.
const (
	rowSame    = iota // nothing changed (or the projection is not inline)
	rowApplied        // the handler wrote the row: version, clean
	rowDirty          // something parked or was quarantined; the row was not written
)

// update records what a committed attempt at a batch of epoch did to its
// aggregates: news from its plans, or, when it has none (careful mode),
// that aggs are not to be guessed.
func (c *rowCache) update(epoch int64, aggs []string, news rowNews, nprojs int) {
	if epoch == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || epoch != c.epoch || len(c.m)+len(aggs) > rowCacheSize {
		c.m, c.epoch = make(map[string][]rowState, len(aggs)), epoch
	}
	for _, agg := range aggs {
		st := c.m[agg]
		if st == nil {
			st = make([]rowState, nprojs)
			c.m[agg] = st
		}
		ns, ok := news[agg]
		if !ok {
			for i := range st {
				st[i].clean = false
			}
			continue
		}
		for i, n := range ns {
			switch n.kind {
			case rowApplied:
				st[i] = rowState{version: n.version, written: true, clean: n.clean}
			case rowDirty:
				st[i].clean = false
			}
		}
	}
}

// rowsFor returns the memory a batch of epoch may use: none unless it
// checks its epoch after taking the rebuild locks (epoch > 0, pauseLock).
func (c *rowCache) rowsFor(epoch int64, pauseLock bool) rowsKnown {
	if epoch == 0 || !pauseLock {
		return rowsKnown{}
	}
	return rowsKnown{c: c, epoch: epoch}
}

// rowsKnown answers for a batch of epoch.
type rowsKnown struct {
	c     *rowCache
	epoch int64
}

// get returns what is remembered of agg's row in the projection of index
// i, and whether anything is.
func (k rowsKnown) get(agg string, i int) (rowState, bool) {
	if k.c == nil {
		return rowState{}, false
	}
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	if k.c.epoch != k.epoch {
		return rowState{}, false
	}
	st, ok := k.c.m[agg]
	if !ok || i >= len(st) {
		return rowState{}, false
	}
	return st[i], true
}

// has reports whether the row of agg in the projection of index i was
// written by the processor's commits.
func (k rowsKnown) has(agg string, i int) bool {
	st, _ := k.get(agg, i)
	return st.written
}

// rowUpdates returns the news of an attempt's plans for the cache: per
// aggregate, for each inline projection, the row its handler wrote (the
// run it applied; Tx.QueueInline counted the row) or that it left
// something parked or quarantined.
func rowUpdates(p *Processor, plans [][]*aggPlan) rowNews {
	news := rowNews{}
	for _, r := range p.projs {
		if r.inlineTable() == nil {
			continue
		}
		for _, pl := range plans[r.index] {
			ns := news[pl.agg]
			if ns == nil {
				ns = make([]rowNew, len(p.projs))
				news[pl.agg] = ns
			}
			after := pl.after()
			dirty := after.parked > 0 || after.blocked
			switch {
			case pl.cut > 0:
				ns[r.index] = rowNew{kind: rowApplied, version: after.version, clean: !dirty}
			case dirty || after != pl.before:
				ns[r.index] = rowNew{kind: rowDirty}
			}
		}
	}
	return news
}
