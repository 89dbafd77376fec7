package streamtest

import (
	"math/rand/v2"

	"github.com/inorder/inorder/aggregate"
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
