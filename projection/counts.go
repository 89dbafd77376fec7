package projection

import "sync/atomic"

// This file holds the processor's outcome counts.

// counts tallies one transaction's outcomes for one projection.
type counts struct {
	n       [len(outcomeNames)]int64
	drained int64
	beyond  int64
}

// counters are a projection's cumulative outcome counts.
type counters struct {
	n       [len(outcomeNames)]atomic.Int64
	drained atomic.Int64
	beyond  atomic.Int64
	batches atomic.Int64
	// deadlocks counts the attempts that failed by a deadlock.
	deadlocks atomic.Int64
	// stale counts the attempts whose memory of the version rows was found
	// stale.
	stale atomic.Int64
}

func (c *counters) add(t counts) {
	for i, v := range t.n {
		if v != 0 {
			c.n[i].Add(v)
		}
	}
	c.drained.Add(t.drained)
	if t.beyond != 0 {
		c.beyond.Add(t.beyond)
	}
	c.batches.Add(1)
}

// Counts are a projection's cumulative counts since the processor started.
type Counts struct {
	// Deliveries counts deliveries by outcome.
	Deliveries map[Outcome]int64
	// Drained counts parked events applied once their predecessors arrived.
	Drained int64
	// Batches counts committed transactions.
	Batches int64
	// Deadlocks counts the transactions that PostgreSQL aborted as part of
	// a deadlock and the processor retried (each costs deadlock_timeout, 1 s
	// by default, of waiting first). The processor's own statements take
	// their locks in one order; a non-zero count points at a handler's
	// writes to shared rows in different orders: see Sums. The warning
	// logged with each names the table and the statement.
	Deadlocks int64
	// BeyondHorizon counts the stale deliveries counted as Duplicate
	// without being checked against the applied event, because their
	// version is older than the applied log keeps: an inline projection's
	// row keeps its last InlineTable.LogEntries versions (the conflict
	// horizon). Such a delivery may have been a conflict. Always 0 for a
	// projection with version rows, whose log keeps every version.
	BeyondHorizon int64
	// StaleMemory counts the transactions that found the processor's
	// memory of its version rows stale (another process, an operator or a
	// lost commit had moved a row since its own last commit) and retried
	// the batch reading them (see Config.RowCache). Each costs the
	// transaction's first round trips. A count that grows with the batches
	// means writers compete for the same aggregates (competing consumers):
	// the memory then turns itself off for a few batches after each.
	StaleMemory int64
}

// Applied returns every event applied: deliveries applied directly plus
// parked events drained.
func (c Counts) Applied() int64 { return c.Deliveries[Applied] + c.Drained }

// Counts returns the cumulative counts of every projection, by name.
func (p *Processor) Counts() map[string]Counts {
	out := make(map[string]Counts, len(p.projs))
	for _, r := range p.projs {
		c := Counts{Deliveries: map[Outcome]int64{}, Drained: r.stats.drained.Load(), Batches: r.stats.batches.Load(),
			Deadlocks: r.stats.deadlocks.Load(), BeyondHorizon: r.stats.beyond.Load(), StaleMemory: r.stats.stale.Load()}
		for _, o := range Outcomes {
			c.Deliveries[o] = r.stats.n[o].Load()
		}
		out[r.name] = c
	}
	return out
}
