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
	"github.com/inorder/inorder/internal/ledgertest"
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

// Baseline is a source benchmark's processor-alone variant: stream fed to
// proc partitioned by aggregate over 4 goroutines (ProcessAll), the ledger
// required to have applied n events. It returns how long it took.
func Baseline(tb testing.TB, proc *projection.Processor, stream []aggregate.Event, batchSize, n int) time.Duration {
	tb.Helper()
	took := ProcessAll(tb, proc, Partition(stream, 4), batchSize)
	require.EqualValues(tb, n, proc.Counts()["ledger"].Applied())
	return took
}

// SourceRun times a source variant's run on bs's schema with consumers
// processors (bs.Processors): start starts a source of the i-th, p, and returns its
// stop; wait returns once its condition holds (the package's own wait). The
// run lasts until the processors applied the events in all;
// then the sources are stopped and, off the clock, the read model is
// required to be the in-order fold of events.
func SourceRun(b *testing.B, bs *ledgertest.Bundle, consumers int, events []aggregate.Event, wait func(cond func() bool), start func(i int, p *projection.Processor) (stop func() error)) time.Duration {
	b.Helper()
	procs := bs.Processors(b, consumers)
	began := time.Now()
	stops := make([]func() error, len(procs))
	for i, p := range procs {
		stops[i] = start(i, p)
	}
	wait(ledgertest.Applied(len(events), procs...))
	took := time.Since(began)
	for _, stop := range stops {
		require.NoError(b, stop())
	}
	b.StopTimer()
	bs.RequireFold(b, events)
	b.StartTimer()
	return took
}

// Variant is one way a benchmark processes the events of a workload shape:
// Run processes those of shape (an index into the benchmark's shapes) in
// round round and returns how long it took.
type Variant struct {
	Name string
	Run  func(shape, round int) time.Duration
}

// Rounds runs, for every round b.Loop asks for, each variant on each shape,
// logs its rate (n events over the time it took) and returns the rates,
// keyed "shape/variant".
func Rounds(b *testing.B, n int, shapes []string, variants ...Variant) Rates {
	rates := Rates{}
	round := 0
	for b.Loop() {
		for sh, name := range shapes {
			for _, v := range variants {
				took := v.Run(sh, round)
				key := name + "/" + v.Name
				rate := float64(n) / took.Seconds()
				rates[key] = append(rates[key], rate)
				b.Logf("round %d %-20s %8.0f events/s  %6.2fs", round, key, rate, took.Seconds())
			}
		}
		round++
	}
	return rates
}

// Report reports, for each shape, each variant's median rate
// ("shape/variant-events/s") and the median ratio of each pair's first
// variant to its second ("shape/a/base"), then 0 ns/op (the rates are the
// figures).
func (r Rates) Report(b *testing.B, shapes, variants []string, pairs ...[2]string) {
	for _, sh := range shapes {
		for _, v := range variants {
			b.ReportMetric(Median(r[sh+"/"+v]), sh+"/"+v+"-events/s")
		}
		for _, p := range pairs {
			ratio, _ := r.Ratio(sh+"/"+p[0], sh+"/"+p[1])
			b.ReportMetric(ratio, sh+"/"+p[0]+"/"+p[1])
		}
	}
	b.ReportMetric(0, "ns/op")
}

// Latencies records timed calls (when each started, how long it took) from
// many goroutines: the figures of a load test, split by when the calls
// ended.
type Latencies struct {
	mu    sync.Mutex
	calls []latency
}

type latency struct {
	start time.Time
	took  time.Duration
}

// Add records a call that started at start and took took.
func (l *Latencies) Add(start time.Time, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, latency{start, took})
}

// Len returns how many calls were recorded.
func (l *Latencies) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.calls)
}

// Split returns the durations of the calls that ended before before, and
// of those that ended at from or later and started at to or earlier.
func (l *Latencies) Split(before, from, to time.Time) (ended, within []time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.calls {
		switch end := c.start.Add(c.took); {
		case end.Before(before):
			ended = append(ended, c.took)
		case !end.Before(from) && !c.start.After(to):
			within = append(within, c.took)
		}
	}
	return ended, within
}

// Quantile returns the q-quantile of ds (q from 0 to 1, 1 its largest; 0
// for none).
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(ds))
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
