package projectiontest

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// This file holds the case of the suite that races an arrival against the
// drain of the parked versions it unblocks.

// arrivalBetweenParkAndDrain parks version 3, then delivers versions 2, 1, 4
// and a copy of 3 at once from different goroutines, grouped into batches
// at random and started with random yields, for many aggregates; then
// version 5 must apply.
func (r *runner) arrivalBetweenParkAndDrain(t *testing.T) {
	c, ctx := r.newCase(t)
	const waves, perWave = 6, 8
	events := r.s.Generate(rand.New(rand.NewPCG(r.f.Seed, 0xba7c)), waves*perWave, 5)
	streams := byAggregate(events)
	rng := rand.New(rand.NewPCG(r.f.Seed, 0xba7d))
	total := 0
	for w := range waves {
		wave := streams[w*perWave : (w+1)*perWave]
		plans := make([]arrivalPlan, len(wave))
		for i := range plans {
			plans[i] = newArrivalPlan(rng)
			total += 6
		}
		errs := make([]error, len(wave))
		var wg sync.WaitGroup
		for i, s := range wave {
			wg.Go(func() { errs[i] = plans[i].run(ctx, c, s) })
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...), "wave %d", w)
	}
	verify(t, c, events, total)
}

// arrivalPlan is one interleaving: which of v2, v3 (copy), v1, v4 go
// together in a batch, and how long each batch's goroutine yields first.
type arrivalPlan struct {
	groups [][]int // indexes into the aggregate's stream
	yields []int
}

func newArrivalPlan(rng *rand.Rand) arrivalPlan {
	idx := shuffled(rng, []int{1, 2, 0, 3})
	var p arrivalPlan
	for len(idx) > 0 {
		k := 1 + rng.IntN(len(idx))
		p.groups = append(p.groups, idx[:k])
		p.yields = append(p.yields, rng.IntN(50))
		idx = idx[k:]
	}
	return p
}

func (p arrivalPlan) run(ctx context.Context, c *tcase, s []aggregate.Event) error {
	res, err := c.deliver(ctx, s[2:3])
	if err != nil {
		return err
	}
	if err := expect(res, 0, s[2], projection.Parked); err != nil {
		return err
	}
	errs := make([]error, len(p.groups))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g, idx := range p.groups {
		wg.Go(func() {
			<-start
			for range p.yields[g] {
				runtime.Gosched()
			}
			batch := make([]aggregate.Event, len(idx))
			for k, i := range idx {
				batch[k] = s[i]
			}
			res, err := c.deliver(ctx, batch)
			if err != nil {
				errs[g] = err
				return
			}
			for k, e := range batch {
				want := []projection.Outcome{projection.Applied, projection.Parked}
				switch e.Version {
				case 1:
					want = []projection.Outcome{projection.Applied}
				case 3:
					want = []projection.Outcome{projection.Duplicate}
				}
				if err := expect(res, k, e, want...); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Versions 1…4 are all applied now, whatever the interleaving.
	res, err = c.deliver(ctx, s[4:5])
	if err != nil {
		return err
	}
	return expect(res, 0, s[4], projection.Applied)
}
