package projectiontest

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/streamtest"
	"github.com/inorder/inorder/projection"
)

// This file holds how the suite delivers: Deliver (competing consumers of
// one queue), delivery of a batch at once, and the schedules it draws —
// duplicates, batches, interleavings.

// Deliver hands batches to workers goroutines that pull from one channel
// and call deliver, as competing consumers of one queue do, and returns the
// first error (which stops the others).
func Deliver(ctx context.Context, batches [][]aggregate.Event, workers int, deliver func(context.Context, []aggregate.Event) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ch := make(chan []aggregate.Event)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for b := range ch {
				if err := deliver(ctx, b); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
feed:
	for _, b := range batches {
		select {
		case ch <- b:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	return context.Cause(ctx)
}

// deliverAtOnce delivers each event as its own batch, all from their own
// goroutines released together, and returns each delivery's outcome (zero
// when the case's Deliver reports none).
func deliverAtOnce(ctx context.Context, c *tcase, events []aggregate.Event) ([]projection.Outcome, error) {
	out := make([]projection.Outcome, len(events))
	errs := make([]error, len(events))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, e := range events {
		wg.Go(func() {
			<-start
			res, err := c.deliver(ctx, []aggregate.Event{e})
			if err == nil && res != nil {
				out[i] = res[0].Outcome
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	return out, errors.Join(errs...)
}

// withDuplicates returns events plus exact copies of a random share of
// them (drawn with replacement), shuffled.
func withDuplicates(rng *rand.Rand, events []aggregate.Event, share float64) []aggregate.Event {
	return streamtest.WithCopies(rng, events, int(float64(len(events))*share+0.999))
}

// byAggregate groups events by aggregate, in order of first appearance,
// keeping their order within each aggregate.
func byAggregate(events []aggregate.Event) [][]aggregate.Event {
	index := map[string]int{}
	var out [][]aggregate.Event
	for _, e := range events {
		i, ok := index[e.Aggregate]
		if !ok {
			i = len(out)
			index[e.Aggregate] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], e)
	}
	return out
}

// interleave merges streams at random, keeping each stream's order.
func interleave(rng *rand.Rand, streams [][]aggregate.Event) []aggregate.Event {
	var tickets []int
	for i, s := range streams {
		for range s {
			tickets = append(tickets, i)
		}
	}
	rng.Shuffle(len(tickets), func(i, j int) { tickets[i], tickets[j] = tickets[j], tickets[i] })
	next := make([]int, len(streams))
	out := make([]aggregate.Event, 0, len(tickets))
	for _, s := range tickets {
		out = append(out, streams[s][next[s]])
		next[s]++
	}
	return out
}

func shuffled[T any](rng *rand.Rand, xs []T) []T {
	out := append([]T(nil), xs...)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
