package ledgertest

import (
	"math/rand/v2"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
)

// Applied returns a condition: the processors applied n events of the
// ledger in all.
func Applied(n int, procs ...*projection.Processor) func() bool {
	return func() bool {
		var sum int64
		for _, p := range procs {
			sum += p.Counts()["ledger"].Applied()
		}
		return sum >= int64(n)
	}
}

// Generate returns a ledger stream of payments × versions events, the same
// for the same seed.
func Generate(seed uint64, payments, versions int) []aggregate.Event {
	return ledger.Generate(rand.New(rand.NewPCG(seed, seed*7+1)), payments, versions)
}
