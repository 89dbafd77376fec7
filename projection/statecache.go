package projection

import (
	"cmp"
	"errors"
	"sync"

	"github.com/inorder/inorder/buffer"
)

// This file holds what a processor remembers of the version rows its own
// commits left, between batches (issue 28, item 1): the cache itself, safe
// for concurrent use. How an attempt takes from it, checks it and feeds it
// is in the file above it (memory.go), with why it is never trusted.

// stateCache remembers, per gate key and aggregate, the version row a
// processor's commits of one generation epoch left. Safe for concurrent use;
// the zero value is empty.
type stateCache struct {
	mu     sync.Mutex
	epoch  int64
	m      map[stateKey]aggMemory
	parked int // parked events held, over all aggregates
}

type stateKey struct{ key, agg string }

// errStaleMemory reports that a version row was not as the processor
// remembered it: the batch is retried reading the rows.
var errStaleMemory = errors.New("projection: version row not as remembered")

// aggMemory is what the processor remembers of one aggregate's version row.
type aggMemory struct {
	st aggState
	// parked are the events parked behind the row, by version, when the
	// memory knows them all (whole); the slice is never changed in place.
	parked []buffer.Parked
	whole  bool
}

// maxParkedRemembered bounds the parked events the memory holds: beyond it,
// an aggregate's parked events are read from the database when it advances.
const maxParkedRemembered = 1 << 16

// memoryOffBatches is how many batches of a processor plan from the
// database after a check of the memory failed.
const memoryOffBatches = 8

// stateNews is what one committed attempt tells the memory: the new state
// of aggregates (set) and the aggregates to forget.
type stateNews struct {
	set    []stateNew
	forget []stateKey
}

type stateNew struct {
	k   stateKey
	mem aggMemory
}

// snapshot returns what the memory holds of aggs in the projection with gate
// key key, for a batch of epoch (nil unless the batch checks its epoch after
// taking the rebuild locks: epoch > 0, pauseLock).
func (c *stateCache) snapshot(epoch int64, pauseLock bool, key string, aggs []string) map[string]aggMemory {
	if epoch == 0 || !pauseLock {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch != epoch || len(c.m) == 0 {
		return nil
	}
	var out map[string]aggMemory
	for _, agg := range aggs {
		if m, ok := c.m[stateKey{key, agg}]; ok {
			if out == nil {
				out = make(map[string]aggMemory, len(aggs))
			}
			out[agg] = m
		}
	}
	return out
}

// update records what a committed attempt at a batch of epoch did. bound is
// Config.RowCache (0 the default, negative: remember nothing); beyond it the
// memory forgets a quarter of what it holds, chosen at random, and those
// rows are read back as batches meet them.
func (c *stateCache) update(epoch int64, news stateNews, bound int) {
	if epoch == 0 || bound < 0 || len(news.set) == 0 && len(news.forget) == 0 {
		return
	}
	bound = cmp.Or(bound, DefaultRowCache)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || epoch != c.epoch {
		if epoch < c.epoch {
			return // a batch of an older epoch
		}
		c.m, c.epoch, c.parked = make(map[stateKey]aggMemory, len(news.set)), epoch, 0
	}
	for _, k := range news.forget {
		c.drop(k)
	}
	if len(c.m)+len(news.set) > bound {
		// Keep three quarters, in a new map: deleting from the old one
		// would leave it at its largest size, tombstones and all (twice
		// the heap, measured by BenchmarkGateMemory).
		keep := make(map[stateKey]aggMemory, bound)
		skip := len(c.m) / 4
		c.parked = 0
		for k, m := range c.m {
			if skip > 0 {
				skip--
				continue
			}
			keep[k] = m
			c.parked += len(m.parked)
		}
		c.m = keep
	}
	for _, nw := range news.set {
		if old, ok := c.m[nw.k]; ok {
			if old.st.rev > nw.mem.st.rev {
				continue // a later commit's news came first
			}
			c.parked -= len(old.parked) // overwritten below
		}
		m := nw.mem
		if c.parked+len(m.parked) > maxParkedRemembered {
			m.parked, m.whole = nil, false
		}
		c.m[nw.k] = m
		c.parked += len(m.parked)
	}
}

func (c *stateCache) drop(k stateKey) {
	if m, ok := c.m[k]; ok {
		c.parked -= len(m.parked)
		delete(c.m, k)
	}
}

// len returns the aggregates remembered (tests).
func (c *stateCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
