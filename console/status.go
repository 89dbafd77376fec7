package console

import (
	"context"
	"sync"
	"time"

	"github.com/inorder/inorder/projection"
)

// totalsTTL is how old the overview's applied totals may be. They are sums
// over every version row of a projection — a scan as long as the table —
// so the overview reads them in the background, at most this often, and
// shows when they were read; every other figure is read live, from
// indexes.
const totalsTTL = 10 * time.Second

// totals caches the projections' aggregate and event totals.
type totals struct {
	mu         sync.Mutex
	at         time.Time
	byName     map[string][2]int64
	refreshing bool
}

// status reads the overview's status: the live figures now, the totals
// from the cache (refreshed in the background when stale; read in line the
// first time).
func (h *handler) status(ctx context.Context) (projection.Status, time.Time, error) {
	st, err := h.proc.Status(ctx, &projection.StatusOptions{NoTotals: true, Entries: -1})
	if err != nil {
		return st, time.Time{}, err
	}
	t := &h.totals
	t.mu.Lock()
	fresh, at := t.byName != nil, t.at
	stale := !fresh || time.Since(t.at) > totalsTTL
	start := stale && !t.refreshing
	if start {
		t.refreshing = true
	}
	t.mu.Unlock()
	if !fresh {
		h.refreshTotals(ctx)
	} else if start {
		go h.refreshTotals(context.WithoutCancel(ctx))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range st.Projections {
		if v, ok := t.byName[st.Projections[i].Name]; ok {
			st.Projections[i].Aggregates, st.Projections[i].Events = v[0], v[1]
		}
	}
	if t.byName != nil {
		at = t.at
	}
	return st, at, nil
}

func (h *handler) refreshTotals(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := h.proc.Status(ctx, &projection.StatusOptions{Entries: -1})
	t := &h.totals
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refreshing = false
	if err != nil {
		h.log.WarnContext(ctx, "console: reading the totals", "error", err)
		return
	}
	t.byName = map[string][2]int64{}
	for _, p := range st.Projections {
		t.byName[p.Name] = [2]int64{p.Aggregates, p.Events}
	}
	t.at = time.Now()
}
