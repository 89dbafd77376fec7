package source_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/source"
)

// fnv1a is FNV-1a, as a server pinning streams to consumers might hash
// them (esdbtest's Pinned strategy does).
func fnv1a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// TestWorkerOfSpreads: sequential aggregate ids spread evenly over the
// workers, and the aggregates a server pins to one of two consumers by
// FNV-1a of their stream (prefix + id, 1024 buckets) still spread over
// both workers of that consumer — with hash % workers, every one of them
// went to the same worker.
func TestWorkerOfSpreads(t *testing.T) {
	t.Parallel()
	const keys = 20000
	for _, n := range []int{1, 2, 3, 4, 8} {
		counts := make([]int, n)
		for i := range keys {
			w := source.WorkerOf(fmt.Sprintf("pay-%06d", i), n)
			require.True(t, w >= 0 && w < n, "worker %d of %d", w, n)
			counts[w]++
		}
		for w, c := range counts {
			require.InDelta(t, keys/n, c, 0.05*keys/float64(n), "n=%d worker %d: %v", n, w, counts)
		}
	}
	for _, prefix := range []string{"payment-", "t1a2b3c4d5e-", ""} {
		var perConsumer [2][2]int
		for i := range keys {
			id := fmt.Sprintf("pay-%06d", i)
			consumer := fnv1a(prefix+id) % 1024 % 2
			perConsumer[consumer][source.WorkerOf(id, 2)]++
		}
		for c, ws := range perConsumer {
			total := ws[0] + ws[1]
			require.Positive(t, total)
			for w, k := range ws {
				require.InDelta(t, 0.5, float64(k)/float64(total), 0.05,
					"prefix %q: consumer %d gives worker %d %d of its %d aggregates", prefix, c, w, k, total)
			}
		}
	}
	require.Equal(t, source.WorkerOf("pay-000001", 4), source.WorkerOf("pay-000001", 4), "deterministic")
}
