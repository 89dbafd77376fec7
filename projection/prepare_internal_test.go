package projection

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
)

// BenchmarkPrepare is the client's time to validate, hash and sort one
// batch of 1000 deliveries (Processor.prepare), on two shapes: in stream
// order (200 aggregates, 5 versions each, interleaved) and shuffled with
// copies. It checks that the result is sorted by aggregate, version and
// position in the batch.
func BenchmarkPrepare(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	var stream []aggregate.Event
	next := map[int]int64{}
	for len(stream) < 1000 {
		a := rng.IntN(200)
		next[a]++
		e, err := aggregate.New(fmt.Sprintf("agg-%06d", a), next[a], "t", map[string]int{"k": rng.IntN(500), "a": rng.IntN(100)})
		require.NoError(b, err)
		stream = append(stream, e)
	}
	shuffled := append(stream[:800:800], stream[:200]...)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	p := &Processor{projs: make([]*registered, 1)}
	for _, c := range []struct {
		name   string
		events []aggregate.Event
	}{{"ordered", stream}, {"shuffled", shuffled}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				bt := p.prepare(Batch{Events: c.events})
				if len(bt.valid) != len(c.events) {
					b.Fatal("deliveries lost")
				}
			}
			bt := p.prepare(Batch{Events: c.events})
			for i := 1; i < len(bt.valid); i++ {
				x, y := bt.valid[i-1], bt.valid[i]
				require.True(b, x.ev.Aggregate < y.ev.Aggregate || x.ev.Aggregate == y.ev.Aggregate && (x.ev.Version < y.ev.Version || x.ev.Version == y.ev.Version && x.idx < y.idx))
			}
		})
	}
}
