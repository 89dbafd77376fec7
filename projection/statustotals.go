package projection

import (
	"context"
	"sync"
	"time"
)

// This file holds the processor's cache of the status totals (see
// StatusOptions.TotalsMaxAge): sums over every version row, which a
// frequently read status must not scan on every call.

// totalsCache is the last reading of the totals.
type totalsCache struct {
	mu         sync.Mutex
	at         time.Time // by the database's clock
	read       time.Time // by this process's clock
	aggs       map[string][2]int64
	applied    map[string]*int64 // by generation key
	refreshing bool
}

// statusCachedTotals reads the status without its totals and fills them in
// from the cache, refreshing it in the background when older than
// o.TotalsMaxAge (in line the first time).
func (p *Processor) statusCachedTotals(ctx context.Context, o StatusOptions) (Status, error) {
	c := &p.totals
	c.mu.Lock()
	have := c.aggs != nil
	start := !c.refreshing && (!have || time.Since(c.read) > o.TotalsMaxAge)
	if start {
		c.refreshing = true
	}
	c.mu.Unlock()
	if !have {
		if err := p.refreshTotals(ctx); err != nil {
			return Status{}, err
		}
	} else if start {
		go func() { _ = p.refreshTotals(context.WithoutCancel(ctx)) }()
	}
	live := o
	live.NoTotals, live.TotalsMaxAge = true, 0
	st, err := p.Status(ctx, &live)
	if err != nil {
		return Status{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st.TotalsAt = c.at
	for i := range st.Projections {
		if v, ok := c.aggs[st.Projections[i].Name]; ok {
			st.Projections[i].Aggregates, st.Projections[i].Events = v[0], v[1]
		}
	}
	for i := range st.Generations {
		if v, ok := c.applied[st.Generations[i].Key]; ok && v != nil {
			n := *v
			st.Generations[i].Applied = &n
		}
	}
	return st, nil
}

// refreshTotals reads the totals now, into the cache.
func (p *Processor) refreshTotals(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := p.Status(ctx, &StatusOptions{Entries: -1})
	c := &p.totals
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshing = false
	if err != nil {
		p.log.WarnContext(ctx, "status: reading the totals", "error", err)
		return err
	}
	c.aggs, c.applied = map[string][2]int64{}, map[string]*int64{}
	for _, s := range st.Projections {
		c.aggs[s.Name] = [2]int64{s.Aggregates, s.Events}
	}
	for _, g := range st.Generations {
		c.applied[g.Key] = g.Applied
	}
	c.at, c.read = st.Time, time.Now()
	return nil
}
