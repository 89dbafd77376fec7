package ledgertest

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

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

// Event returns the ledger event of type typ with data d, version version
// of aggregate agg.
func Event(tb testing.TB, agg string, version int64, typ string, d ledger.Data) aggregate.Event {
	tb.Helper()
	e, err := aggregate.New(agg, version, typ, d)
	require.NoError(tb, err)
	return e
}

// Generate returns a ledger stream of payments × versions events, the same
// for the same seed.
func Generate(seed uint64, payments, versions int) []aggregate.Event {
	return ledger.Generate(rand.New(rand.NewPCG(seed, seed*7+1)), payments, versions)
}

// Delivered generates a ledger stream of payments × versions events from
// rng (ledger.Generate), has proc process it in one batch, requires that
// this did not fail and returns the stream.
func Delivered(tb testing.TB, proc *projection.Processor, rng *rand.Rand, payments, versions int) []aggregate.Event {
	tb.Helper()
	events := ledger.Generate(rng, payments, versions)
	_, err := proc.Process(tb.Context(), projection.Batch{Events: events})
	require.NoError(tb, err)
	return events
}

// Chunks hands out a stream in n chunks of about equal size, in order, for
// tests that publish while faults happen.
type Chunks struct {
	events []aggregate.Event
	size   int
	// Sent counts the events handed out so far.
	Sent int
}

// NewChunks returns events in n chunks.
func NewChunks(events []aggregate.Event, n int) *Chunks {
	return &Chunks{events: events, size: (len(events) + n - 1) / n}
}

// Next returns the next chunk, empty once every event was handed out.
func (c *Chunks) Next() []aggregate.Event {
	end := min(c.Sent+c.size, len(c.events))
	part := c.events[c.Sent:end]
	c.Sent = end
	return part
}

// Done reports whether every event was handed out.
func (c *Chunks) Done() bool { return c.Sent >= len(c.events) }
