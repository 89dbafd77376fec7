package source

import (
	"sync/atomic"
	"time"

	"github.com/inorder/inorder/source/internal/collect"
)

// Close reasons of a batch, for Stats.Closed.
const (
	// CloseFull: the batch reached BatchSize.
	CloseFull = iota
	// CloseWindow: the window was full (MaxInFlight deliveries not
	// settled), so no more deliveries could come until one commits.
	CloseWindow
	// CloseMaxWait: MaxWait passed since its first delivery.
	CloseMaxWait
	// CloseFlush: Flush asked for it.
	CloseFlush
	// CloseRetry: deliveries of a failed batch retried by the worker.
	CloseRetry
	closeReasons
)

// The metrics name the close reasons by collect.CloseReasons, in the order
// of the constants ("full", "window", "max_wait", "flush", "retry"): one
// name each.
var _ [closeReasons]string = collect.CloseReasons

// fillBuckets is the number of buckets of Stats.Fill, those of the metrics
// (collect.FillBuckets).
const fillBuckets = len(collect.FillBuckets)

// Stats are a dispatcher's counters, cumulative since it was made, and its
// current window.
type Stats struct {
	// Dispatched counts deliveries queued by Dispatch.
	Dispatched int64
	// Batches counts Process calls; Committed those that committed.
	Batches, Committed int64
	// Acked and Nacked count deliveries settled either way.
	Acked, Nacked int64
	// Retried counts deliveries a worker retried itself after a failure.
	Retried int64
	// Failures counts failed Process calls.
	Failures int64

	// InFlight is how many deliveries are dispatched and not settled now;
	// MaxInFlight the window (Config.MaxInFlight).
	InFlight, MaxInFlight int
	// BatchSize is Config.BatchSize, the denominator of Fill.
	BatchSize int
	// Closed counts batches by why they were closed, indexed by the Close…
	// constants.
	Closed [closeReasons]int64
	// Fill counts batches by the share of BatchSize they filled, in
	// tenths: Fill[0] those with a share up to 0.1, Fill[i] those with a
	// share in (i/10, (i+1)/10].
	// FillSum is the sum of the shares.
	Fill    [fillBuckets]int64
	FillSum float64
	// Idle is the time workers spent waiting for input with nothing to
	// process, summed over workers; Filling the time they spent holding a
	// partial batch, waiting for it to fill. Both grow while a worker is
	// starved: Filling when it waits for MaxWait, Idle when nothing comes.
	Idle, Filling time.Duration
}

type dispatcherStats struct {
	dispatched, batches, committed, acked, nacked, retried, failures atomic.Int64
	closed                                                           [closeReasons]atomic.Int64
	fill                                                             [fillBuckets]atomic.Int64
	fillSumMicros                                                    atomic.Int64 // sum of fill shares, in millionths
	idle, filling                                                    atomic.Int64 // nanoseconds
}

// observeBatch counts a batch of n deliveries closed for reason.
func (s *dispatcherStats) observeBatch(reason, n, batchSize int) {
	s.closed[reason].Add(1)
	share := float64(n) / float64(batchSize)
	i := 0
	for i < fillBuckets-1 && share > collect.FillBuckets[i] {
		i++
	}
	s.fill[i].Add(1)
	s.fillSumMicros.Add(int64(share * 1e6))
}
