package streamtest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// WithCopies returns events plus extra exact copies of events drawn by rng
// (with replacement), all shuffled by rng: what an at-least-once,
// any-order source delivers.
func WithCopies(rng *rand.Rand, events []aggregate.Event, extra int) []aggregate.Event {
	out := make([]aggregate.Event, 0, len(events)+extra)
	out = append(out, events...)
	for range extra {
		out = append(out, events[rng.IntN(len(events))])
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// Batches cuts events into consecutive batches of 1…maxBatch events, their
// sizes drawn by rng.
func Batches(rng *rand.Rand, events []aggregate.Event, maxBatch int) [][]aggregate.Event {
	var out [][]aggregate.Event
	for len(events) > 0 {
		n := min(1+rng.IntN(maxBatch), len(events))
		out = append(out, events[:n:n])
		events = events[n:]
	}
	return out
}

// AtOnce has proc process e, as a batch of its own, from n goroutines
// released together, and returns how many of them got each outcome; the
// errors of those that failed are joined.
func AtOnce(ctx context.Context, proc *projection.Processor, e aggregate.Event, n int) (map[projection.Outcome]int, error) {
	var mu sync.Mutex
	counts := map[projection.Outcome]int{}
	var errs []error
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			<-start
			res, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{e}})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			counts[res[0].Outcome]++
		})
	}
	close(start)
	wg.Wait()
	return counts, errors.Join(errs...)
}
