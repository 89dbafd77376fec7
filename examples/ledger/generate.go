package ledger

import (
	"fmt"
	"math/rand/v2"

	"github.com/inorder/inorder/aggregate"
)

// Generate returns a realistic stream of payments events: the given number
// of payments with versions events each (at least 1), interleaved across
// payments at random but in version order within each payment — the order an
// event store would hold them in. The same rng state gives the same stream.
func Generate(rng *rand.Rand, payments, versions int) []aggregate.Event {
	streams := make([][]aggregate.Event, payments)
	for i := range streams {
		streams[i] = payment(rng, fmt.Sprintf("pay-%06d", i), versions)
	}
	return Interleave(rng, streams)
}

// payment generates one payment's events.
func payment(rng *rand.Rand, id string, versions int) []aggregate.Event {
	es := make([]aggregate.Event, 0, versions)
	add := func(typ string, d Data) {
		e, err := aggregate.New(id, int64(len(es)+1), typ, d)
		if err != nil {
			panic(err) // Data always marshals
		}
		es = append(es, e)
	}
	add(Authorized, Data{
		Payer:  fmt.Sprintf("customer-%03d", rng.IntN(1000)),
		Payee:  fmt.Sprintf("merchant-%02d", rng.IntN(100)),
		Amount: 1000 + rng.Int64N(9000),
	})
	for len(es) < versions {
		switch r := rng.IntN(100); {
		case r < 10:
			add(Approved, Data{})
		case r < 60:
			add(Captured, Data{Amount: 100 + rng.Int64N(4000)})
		case r < 90:
			add(Refunded, Data{Amount: 50 + rng.Int64N(2000)})
		case r < 95:
			add(Voided, Data{})
		default:
			add(Failed, Data{Reason: "issuer declined"})
		}
	}
	return es
}

// Interleave merges streams into one sequence, choosing the next stream at
// random with probability proportional to what it has left, and keeping each
// stream's own order.
func Interleave(rng *rand.Rand, streams [][]aggregate.Event) []aggregate.Event {
	total := 0
	for _, s := range streams {
		total += len(s)
	}
	// Tickets: one per remaining event, naming its stream; drawing tickets
	// without replacement and emitting the stream's next event keeps
	// per-stream order.
	tickets := make([]int32, 0, total)
	for i, s := range streams {
		for range s {
			tickets = append(tickets, int32(i))
		}
	}
	rng.Shuffle(len(tickets), func(i, j int) { tickets[i], tickets[j] = tickets[j], tickets[i] })
	next := make([]int, len(streams))
	out := make([]aggregate.Event, 0, total)
	for _, t := range tickets {
		out = append(out, streams[t][next[t]])
		next[t]++
	}
	return out
}
