package projection

import (
	"cmp"
	"sync"
)

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

// DefaultRowCache is Config.RowCache's default: the aggregates whose
// inline rows, and those whose version rows, a processor remembers (about
// 100 bytes each, 13 MB per kind).
const DefaultRowCache = 1 << 17

// rowNews is what one committed attempt tells the cache (see rowUpdates):
// for the k-th aggregate of aggs, its news for the projection of index i is
// news[k*n+i], n the processor's projections.
type rowNews struct {
	aggs []string
	news []rowNew
}

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
// aggregates aggs: news from its plans, or, when it has none (careful
// mode), that aggs are not to be guessed. n is the processor's projections;
// bound the aggregates remembered (Config.RowCache: 0 the default,
// negative none): at the bound the memory forgets them all and starts
// again, and the rows it forgot are read back as batches meet them.
func (c *rowCache) update(epoch int64, aggs []string, news rowNews, n, bound int) {
	if epoch == 0 || bound < 0 {
		return
	}
	bound = cmp.Or(bound, DefaultRowCache)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || epoch != c.epoch || len(c.m)+len(aggs) > bound {
		c.m, c.epoch = make(map[string][]rowState, len(aggs)), epoch
	}
	var backing []rowState // of the aggregates not remembered yet
	state := func(agg string) []rowState {
		st := c.m[agg]
		if st == nil {
			if len(backing) < n {
				backing = make([]rowState, n*max(len(aggs)/4, 1))
			}
			st, backing = backing[:n:n], backing[n:]
			c.m[agg] = st
		}
		return st
	}
	if news.aggs == nil {
		for _, agg := range aggs {
			st := state(agg)
			for i := range st {
				st[i].clean = false
			}
		}
		return
	}
	for k, agg := range news.aggs {
		st := state(agg)
		for i, nw := range news.news[k*n : (k+1)*n] {
			switch nw.kind {
			case rowApplied:
				st[i] = rowState{version: nw.version, written: true, clean: nw.clean}
			case rowDirty:
				st[i].clean = false
			}
		}
	}
}

// with calls fn with the memory a batch of epoch may use, under the
// cache's lock (fn must not keep it): none unless the batch checks its
// epoch after taking the rebuild locks (epoch > 0, pauseLock).
func (c *rowCache) with(epoch int64, pauseLock bool, fn func(rowsKnown)) {
	if epoch == 0 || !pauseLock {
		fn(rowsKnown{})
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch != epoch {
		fn(rowsKnown{known: true})
		return
	}
	fn(rowsKnown{m: c.m, known: true})
}

// rowsKnown is what a batch may take from a processor's memory.
type rowsKnown struct {
	m     map[string][]rowState
	known bool // the batch may use the memory (which may be empty)
}

// get returns what is remembered of agg's row in the projection of index
// i, and whether anything is.
func (k rowsKnown) get(agg string, i int) (rowState, bool) {
	st, ok := k.m[agg]
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
