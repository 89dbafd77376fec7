package benchtest

import (
	"context"
	"hash/fnv"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// Partition splits events over n parts by aggregate (FNV-64a of its id):
// an aggregate's events all in one part, in their order.
func Partition(events []aggregate.Event, n int) [][]aggregate.Event {
	parts := make([][]aggregate.Event, n)
	for _, ev := range events {
		h := fnv.New64a()
		h.Write([]byte(ev.Aggregate))
		w := h.Sum64() % uint64(n)
		parts[w] = append(parts[w], ev)
	}
	return parts
}

// ProcessAll feeds every part to proc from a goroutine of its own, in
// batches of batchSize, and returns how long it took: the processor alone,
// the baseline of a source's benchmark.
func ProcessAll(tb testing.TB, proc *projection.Processor, parts [][]aggregate.Event, batchSize int) time.Duration {
	tb.Helper()
	began := time.Now()
	var wg sync.WaitGroup
	for _, part := range parts {
		wg.Go(func() {
			for chunk := range slices.Chunk(part, batchSize) {
				_, err := proc.Process(context.Background(), projection.Batch{Events: chunk})
				require.NoError(tb, err)
			}
		})
	}
	wg.Wait()
	return time.Since(began)
}

// Median returns the median of xs, which must not be empty.
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Rates are a benchmark's events/s, per variant, one a round.
type Rates map[string][]float64

// Ratio returns the median over the rounds of a's rate divided by base's
// in the same round; false when either has no rounds.
func (r Rates) Ratio(a, base string) (float64, bool) {
	if len(r[a]) == 0 || len(r[base]) == 0 {
		return 0, false
	}
	var rs []float64
	for i := range r[a] {
		rs = append(rs, r[a][i]/r[base][i])
	}
	return Median(rs), true
}
