package projection

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/buffer"
)

// TestStateCacheBound: the memory of version rows holds at most its bound
// of aggregates and maxParkedRemembered parked events, whatever it is told;
// what it forgot is absent (read back by the batches), what it keeps is what
// it was last told, and news of an older epoch or an older revision does not
// overwrite newer. It logs the heap the memory takes at the default bound.
func TestStateCacheBound(t *testing.T) {
	const bound = 1000
	var c stateCache
	news := func(from, n int, rev int64, parked int) stateNews {
		var ns stateNews
		for i := from; i < from+n; i++ {
			m := aggMemory{st: aggState{version: rev, rev: rev}, whole: true}
			for v := range parked {
				m.parked = append(m.parked, buffer.Parked{Event: aggregate.Event{Aggregate: fmt.Sprint(i), Version: rev + 2 + int64(v)}})
			}
			m.st.parked = int32(parked)
			ns.set = append(ns.set, stateNew{k: stateKey{"p", fmt.Sprint(i)}, mem: m})
		}
		return ns
	}
	for k := 0; k < 50; k++ {
		c.update(1, news(k*100, 100, int64(k+1), 0), bound)
		require.LessOrEqual(t, c.len(), bound)
	}
	// The latest aggregates are kept, at their last news.
	snap := c.snapshot(1, true, "p", []string{"4950", "4999"})
	require.Equal(t, int64(50), snap["4999"].st.rev)
	// An older revision does not overwrite; a newer does.
	c.update(1, news(4999, 1, 3, 0), bound)
	require.Equal(t, int64(50), c.snapshot(1, true, "p", []string{"4999"})["4999"].st.rev)
	c.update(1, news(4999, 1, 60, 0), bound)
	require.Equal(t, int64(60), c.snapshot(1, true, "p", []string{"4999"})["4999"].st.rev)
	// Forget.
	c.update(1, stateNews{forget: []stateKey{{"p", "4999"}}}, bound)
	require.NotContains(t, c.snapshot(1, true, "p", []string{"4999"}), "4999")
	// Another epoch starts again; an older one is ignored; batches that do
	// not check their epoch get nothing.
	c.update(2, news(0, 10, 1, 0), bound)
	require.Equal(t, 10, c.len())
	c.update(1, news(100, 10, 1, 0), bound)
	require.Equal(t, 10, c.len())
	require.Nil(t, c.snapshot(1, true, "p", []string{"0"}))
	require.Nil(t, c.snapshot(2, false, "p", []string{"0"}))
	require.Len(t, c.snapshot(2, true, "p", []string{"0", "1", "100"}), 2)
	// Parked events: at most maxParkedRemembered; beyond, the state is kept
	// without them (not whole: read from the database).
	c.update(3, news(0, 700, 1, 100), maxParkedRemembered)
	require.LessOrEqual(t, c.parked, maxParkedRemembered)
	var whole, partial int
	for _, m := range c.m {
		if m.whole {
			whole++
			require.Len(t, m.parked, 100)
		} else {
			partial++
			require.Empty(t, m.parked)
		}
	}
	require.Equal(t, maxParkedRemembered/100, whole)
	require.Equal(t, 700-whole, partial)

	// The heap of the memory at the default bound, aggregate ids of 12 bytes.
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var big stateCache
	for k := 0; k < DefaultRowCache/1000; k++ {
		var ns stateNews
		for i := range 1000 {
			ns.set = append(ns.set, stateNew{k: stateKey{"ledger", fmt.Sprintf("agg-%08d", k*1000+i)}, mem: aggMemory{st: aggState{version: 3, rev: 3}, whole: true}})
		}
		big.update(1, ns, 0)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	require.Equal(t, DefaultRowCache/1000*1000, big.len())
	t.Logf("%d aggregates remembered: %.1f MB of heap, %.0f bytes each", big.len(),
		float64(after.HeapAlloc-before.HeapAlloc)/1e6, float64(after.HeapAlloc-before.HeapAlloc)/float64(big.len()))
	runtime.KeepAlive(&big)
}
