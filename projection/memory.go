package projection

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/buffer"
)

// This file holds how an attempt uses what a processor remembers of the
// version rows its own commits left, between batches (issue 28, item 1;
// statecache.go holds the cache): the gate's state in the worker's memory,
// validated by every transaction, never trusted. It also holds the news an
// attempt's plans give the cache of inline rows (inline_rows.go).
//
// An optimistic attempt (neither locked nor careful) of a projection with
// version rows reads the version rows of its aggregates, the events parked
// behind those it advances and the parked keys it redelivers: on a shuffled
// stream, about a third of the gate's server time (docs/benchmarks.md, "The
// bound of durable parking"). For an aggregate whose version row the
// processor's last commit wrote, the memory holds that row — version,
// parked count, blocked, revision — and, while it knows them all, the
// events parked behind it; the attempt plans from them instead of reading
// the database. That is a guess, as the unlocked read it replaces was, and
// the transaction checks it before the handler runs:
//
//   - every version row the plan writes goes through the compare-and-set on
//     its revision (writeVersions), which fails if the row is not at the
//     revision the memory holds;
//   - the rows of the remembered aggregates the plan does not write (every
//     delivery a duplicate of an applied or parked version) are read back
//     and compared (queueMemoryCheck).
//
// A version row's revision grows with every change of the row — its
// version, its parked count, its blocked flag, what an operator decides —
// and rows go only by a rebuild in place, which changes the generation
// epoch the memory belongs to (see rowCache): a row at the remembered
// revision is in the remembered state, and its parked events are the
// remembered ones (no transaction parks or drains an aggregate's events
// without writing its version row). A check that fails is an
// errStaleMemory: the processor forgets the batch's aggregates, turns the
// memory off for a few batches (competing consumers move rows under it)
// and retries the batch reading the rows, as before.
//
// Attempts that read their version rows — every attempt of a processor with
// an inline projection, which locks them in the global lock order, and
// locked attempts — take from the memory only the parked events of the rows
// they find exactly as remembered, revision included (matchRemembered). An
// inline projection's fast path leaves its version rows as they were, so
// the memory forgets the aggregates it takes.
//
// Revisions the memory records are exact after a compare-and-set or a
// read, and a lower bound after speculation (which increments the row's
// revision without returning it; the memory records the remembered one
// plus one, or 1 for an aggregate it did not know): a revision lower than
// the row's only makes the next check fail, never pass wrongly.

// remembered returns the memory of an aggregate after plan pl committed at
// revision rev, with the events parked behind it when the attempt knew them
// all before (whole), and whether there is one to keep (a plan cut short by
// a careful attempt is corrected by a second write: not remembered).
func (pl *aggPlan) remembered(rev int64, now time.Time) (aggMemory, bool) {
	after := pl.after()
	if pl.written != (aggState{}) && after != pl.written || after.blocked {
		return aggMemory{}, false
	}
	after.rev = rev
	if after.parked == 0 {
		return aggMemory{st: after, whole: true}, true
	}
	if !pl.whole {
		return aggMemory{st: after}, true
	}
	drained := make(map[int64]bool, len(pl.run))
	for k, c := range pl.run {
		if k <= pl.cut && c.origin == fromParked {
			drained[c.ev.Version] = true
		}
	}
	parked := make([]buffer.Parked, 0, after.parked)
	for _, e := range pl.parkedIn {
		if !drained[e.Version] {
			parked = append(parked, e)
		}
	}
	add := func(c candidate) {
		parked = append(parked, buffer.Parked{Event: c.ev, Hash: c.hash, ParkedAt: now})
	}
	for k, c := range pl.run {
		if k > pl.cut && c.origin == fromBatch {
			add(c)
		}
	}
	for _, c := range pl.park {
		add(c)
	}
	if int32(len(parked)) != after.parked {
		return aggMemory{st: after}, true // not what the row counts: do not guess
	}
	return aggMemory{st: after, parked: parked, whole: true}, true
}

// remember takes the attempt's snapshot of the memory, for the projections
// with version rows of a processor that checks its epoch.
func (a *attempt) remember() {
	p, bt := a.p, a.bt
	a.mem, a.assumed = nil, nil
	if p.cfg.RowCache < 0 || a.mode.careful {
		return
	}
	for _, r := range p.projs {
		m := p.states.snapshot(bt.epoch, p.pauseLock, r.key, bt.aggs)
		if m == nil {
			continue
		}
		if a.mem == nil {
			a.mem = make([]map[string]aggMemory, len(p.projs))
			a.assumed = make([]map[string]aggMemory, len(p.projs))
			a.known = make([]map[string]aggMemory, len(p.projs))
		}
		a.mem[r.index] = m
	}
}

// matchRemembered finds, once the attempt read (or assumed) its version
// rows, the aggregates whose rows are exactly as remembered, revision
// included, with every parked event remembered: their parked events are the
// remembered ones (a revision changes with every park and drain), so
// planning needs not read them. A locked read (every attempt of a processor
// with an inline projection, and locked attempts) makes that exact for the
// transaction; an unlocked one as of the read, as reading the parked events
// would be, and the compare-and-set checks the rows the plan writes.
func (a *attempt) matchRemembered() {
	for i, mem := range a.mem {
		if len(mem) == 0 {
			continue
		}
		states := a.states[i]
		var known map[string]aggMemory
		var parked int64
		for agg, m := range mem {
			if st, ok := states[agg]; ok && m.whole && st == m.st {
				if known == nil {
					known = make(map[string]aggMemory, len(mem))
				}
				known[agg] = m
				if m.st.parked > 0 {
					parked++
				}
			}
		}
		a.known[i] = known
		a.p.parkedRemembered.Add(parked)
	}
}

// knownParked returns the aggregates of projection r whose parked events
// are the remembered ones (nil if none).
func (a *attempt) knownParked(r *registered) map[string]aggMemory {
	if a.known == nil {
		return nil
	}
	return a.known[r.index]
}

// assumeRemembered fills projection r's states of the aggregates of aggs
// that the memory holds, when the attempt may plan from it, and returns the
// others: the version rows to read.
func (a *attempt) assumeRemembered(r *registered, aggs []string) []string {
	if a.mem == nil || a.noMemory || a.p.memOff.Load() > 0 || r.inlineTable() != nil {
		return aggs
	}
	mem := a.mem[r.index]
	if len(mem) == 0 {
		return aggs
	}
	into := a.states[r.index]
	assumed := make(map[string]aggMemory, len(mem))
	rest := make([]string, 0, len(aggs)-min(len(mem), len(aggs)))
	for _, agg := range aggs {
		if m, ok := mem[agg]; ok {
			into[agg] = m.st
			assumed[agg] = m
			continue
		}
		rest = append(rest, agg)
	}
	a.assumed[r.index] = assumed
	a.p.memoryHits.Add(int64(len(assumed)))
	return rest
}

// assumedOf returns the aggregates of projection r that the attempt took
// from the memory (nil if none).
func (a *attempt) assumedOf(r *registered) map[string]aggMemory {
	if a.assumed == nil {
		return nil
	}
	return a.assumed[r.index]
}

// assumedAny reports whether one of aggs was taken from the memory.
func (a *attempt) assumedAny(r *registered, aggs []string) bool {
	mem := a.assumedOf(r)
	if len(mem) == 0 {
		return false
	}
	for _, agg := range aggs {
		if _, ok := mem[agg]; ok {
			return true
		}
	}
	return false
}

// queueMemoryCheck queues the read of the version rows of the aggregates
// that the attempt took from the memory and whose plans write nothing (the
// compare-and-set checks the others), and returns the check to run once it
// was sent: errStaleMemory unless every row is as remembered. Nil if there
// are none.
func (a *attempt) queueMemoryCheck(b *pgx.Batch, r *registered, plans []*aggPlan) func() error {
	mem := a.assumedOf(r)
	if len(mem) == 0 {
		return nil
	}
	var aggs []string
	var want []aggState
	for _, pl := range plans {
		if _, ok := mem[pl.agg]; ok && pl.written == (aggState{}) {
			aggs, want = append(aggs, pl.agg), append(want, pl.before)
		}
	}
	if len(aggs) == 0 {
		return nil
	}
	got := make(map[string]aggState, len(aggs))
	a.p.store.Versions.QueueRead(b, r.key, aggs, false).Query(func(rows pgx.Rows) error {
		return scanStates(rows, got)
	})
	return func() error {
		for k, agg := range aggs {
			if got[agg] != want[k] {
				return fmt.Errorf("%w: projection %s: aggregate %s moved", errStaleMemory, r.name, agg)
			}
		}
		return nil
	}
}

// stateNews returns what the attempt's plans, once committed, tell the
// memory.
func (a *attempt) stateNews(plans [][]*aggPlan) stateNews {
	p := a.p
	if p.cfg.RowCache < 0 || a.bt.epoch == 0 || !p.pauseLock {
		return stateNews{}
	}
	n := 0
	for _, ps := range plans {
		n += len(ps)
	}
	news := stateNews{set: make([]stateNew, 0, n)}
	now := time.Now()
	for _, r := range p.projs {
		var mem map[string]aggMemory
		if a.mem != nil {
			mem = a.mem[r.index]
		}
		inline, fast := r.inlineTable() != nil, a.fastAggs(r)
		for _, pl := range plans[r.index] {
			k := stateKey{r.key, pl.agg}
			rev := pl.before.rev
			_, isFast := fast[pl.agg]
			switch {
			case inline && (a.mode.speculative || isFast):
				// An inline projection's fast path leaves the version row
				// as it was, or inserts it empty: its revision is not known.
				news.forget = append(news.forget, k)
				continue
			case a.mode.speculative:
				// The speculative write incremented the row's revision
				// without returning it: known only from the memory, or for
				// a row that speculation most likely inserted.
				m, ok := mem[pl.agg]
				switch {
				case ok && m.st.version == pl.before.version && m.st.parked == 0 && !m.st.blocked:
					rev = m.st.rev + 1
				case !ok && pl.before.version == 0:
					rev = 1
				default:
					news.forget = append(news.forget, k)
					continue
				}
			case pl.written != (aggState{}):
				rev++
			}
			if m, keep := pl.remembered(rev, now); keep {
				news.set = append(news.set, stateNew{k: k, mem: m})
			} else {
				news.forget = append(news.forget, k)
			}
		}
	}
	return news
}

// forgetting returns news that forget aggs in every projection: what a
// careful attempt, which writes them aggregate by aggregate, and a batch
// that found the memory stale tell it.
func (p *Processor) forgetting(aggs []string) stateNews {
	var news stateNews
	for _, r := range p.projs {
		for _, agg := range aggs {
			news.forget = append(news.forget, stateKey{r.key, agg})
		}
	}
	return news
}

// rowUpdates returns the news of an attempt's plans for the row cache: per
// aggregate, for each inline projection, the row its handler wrote (the
// run it applied; Tx.QueueInline counted the row) or that it left
// something parked or quarantined. Every projection plans the attempt's
// aggregates in the same order (attempt.plan).
func rowUpdates(p *Processor, plans [][]*aggPlan) rowNews {
	n := len(p.projs)
	var out rowNews
	for _, r := range p.projs {
		if r.inlineTable() == nil {
			continue
		}
		ps := plans[r.index]
		if out.aggs == nil {
			out.aggs = make([]string, len(ps))
			for k, pl := range ps {
				out.aggs[k] = pl.agg
			}
			out.news = make([]rowNew, len(ps)*n)
		}
		for k, pl := range ps {
			if k >= len(out.aggs) || out.aggs[k] != pl.agg {
				return rowNews{} // not in the same order: tell nothing
			}
			after := pl.after()
			dirty := after.parked > 0 || after.blocked
			switch {
			case pl.cut > 0:
				out.news[k*n+r.index] = rowNew{kind: rowApplied, version: after.version, clean: !dirty}
			case dirty || after != pl.before:
				out.news[k*n+r.index] = rowNew{kind: rowDirty}
			}
		}
	}
	return out
}
