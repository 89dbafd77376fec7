package projectiontest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/streamtest"
	"github.com/inorder/inorder/projection"
)

// Subject is what the suite tests: a projection, or a source feeding one.
type Subject struct {
	// Generate returns a valid stream for the projection: aggregates
	// aggregates of versions versions each, every (aggregate, version)
	// once, in stream order (each aggregate's versions ascending, aggregates
	// interleaved in any way). The same rng state must give the same
	// stream. Required.
	Generate func(rng *rand.Rand, aggregates, versions int) []aggregate.Event

	// New returns a fresh, isolated case for one sub-test. It is called
	// from parallel sub-tests. Required.
	New func(t *testing.T) *Case
}

// Case is one sub-test's processor and read model.
type Case struct {
	// Processor applies the deliveries. Its schema must be freshly migrated
	// and its read model empty; the suite reads the schema's tables through
	// Processor.Pool and checks Processor.Counts. Required.
	Processor *projection.Processor

	// Deliver delivers one batch and returns once it is durably processed
	// (nil) or not processed (an error). It is called from many goroutines
	// at once. Default: Processor.Process, whose outcomes the suite then
	// checks one by one. A source adapter replaces it to feed the
	// deliveries through the source; it must hand them to Processor, and
	// the suite then skips the checks that assume each delivery is
	// processed exactly once (a source may redeliver).
	Deliver func(ctx context.Context, events []aggregate.Event) error

	// Check asserts that the read model equals the in-order fold of events:
	// the distinct events of the stream, each (aggregate, version) once,
	// in stream order. Required.
	Check func(t *testing.T, events []aggregate.Event)
}

// Features sizes the suite. The zero value is valid: every field has a
// default.
type Features struct {
	// Seeds is how many random schedules RandomSchedules runs. Default 3
	// with -short, 5 otherwise.
	Seeds int

	// Seed is the first seed; RandomSchedules uses Seed, Seed+1, … and the
	// other sub-tests use Seed. Default 1.
	Seed uint64

	// Aggregates and Versions size RandomSchedules' and
	// ReversedPerAggregate's streams. Default 1000 and 10.
	// OneAggregateInParallel and DuplicatesOfParked use max(Versions, 5)
	// versions; the other sub-tests have fixed shapes.
	Aggregates, Versions int

	// Workers is how many goroutines deliver concurrently in
	// RandomSchedules and ReversedPerAggregate. Default 4.
	Workers int

	// MaxBatch is the largest batch RandomSchedules delivers; batch sizes
	// are uniform in 1…MaxBatch. Default 500.
	MaxBatch int

	// Duplicates is the share of RandomSchedules' stream delivered again as
	// exact copies. Default 0.25.
	Duplicates float64

	// Timeout bounds each sub-test; a delivery still running then fails
	// it. Default 3 minutes.
	Timeout time.Duration
}

func (f Features) withDefaults() Features {
	seeds := 5
	if testing.Short() {
		seeds = 3
	}
	f.Seeds = cmp.Or(f.Seeds, seeds)
	f.Seed = cmp.Or(f.Seed, 1)
	f.Aggregates = cmp.Or(f.Aggregates, 1000)
	f.Versions = cmp.Or(f.Versions, 10)
	f.Workers = cmp.Or(f.Workers, 4)
	f.MaxBatch = cmp.Or(f.MaxBatch, 500)
	f.Duplicates = cmp.Or(f.Duplicates, 0.25)
	f.Timeout = cmp.Or(f.Timeout, 3*time.Minute)
	return f
}

// Run runs the conformance suite on s, as parallel sub-tests of t.
func Run(t *testing.T, s Subject, f Features) {
	t.Helper()
	require.NotNil(t, s.Generate, "projectiontest: Subject.Generate is required")
	require.NotNil(t, s.New, "projectiontest: Subject.New is required")
	f = f.withDefaults()
	r := &runner{s: s, f: f}

	t.Run("RandomSchedules", func(t *testing.T) {
		t.Parallel()
		for i := range uint64(f.Seeds) {
			seed := f.Seed + i
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
				t.Parallel()
				r.randomSchedule(t, seed)
			})
		}
	})
	for _, sub := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"PartitionedWorkers", r.partitioned},
		{"ReversedPerAggregate", r.reversed},
		{"OneAggregateInParallel", r.oneAggregateInParallel},
		{"DuplicatesOfParked", r.duplicatesOfParked},
		{"ArrivalBetweenParkAndDrain", r.arrivalBetweenParkAndDrain},
		{"LongAggregates", r.longAggregates},
	} {
		t.Run(sub.name, func(t *testing.T) {
			t.Parallel()
			sub.run(t)
		})
	}
	t.Run("SameEventConcurrently", func(t *testing.T) {
		t.Parallel()
		for _, n := range []int{2, 8, 64} {
			t.Run(fmt.Sprintf("goroutines=%d", n), func(t *testing.T) {
				t.Parallel()
				r.sameEventConcurrently(t, n)
			})
		}
	})
}

type runner struct {
	s Subject
	f Features
}

// tcase is a Case prepared for one sub-test.
type tcase struct {
	*Case
	// exact is set when deliveries go straight to Processor.Process: each
	// delivery is processed once and its outcome is known.
	exact bool
}

func (r *runner) newCase(t *testing.T) (*tcase, context.Context) {
	t.Helper()
	c := r.s.New(t)
	require.NotNil(t, c, "projectiontest: Subject.New returned nil")
	require.NotNil(t, c.Processor, "projectiontest: Case.Processor is required")
	require.NotNil(t, c.Check, "projectiontest: Case.Check is required")
	ctx, cancel := context.WithTimeout(t.Context(), r.f.Timeout)
	t.Cleanup(cancel)
	return &tcase{Case: c, exact: c.Deliver == nil}, ctx
}

// deliver delivers one batch; its results are nil unless c.exact.
func (c *tcase) deliver(ctx context.Context, events []aggregate.Event) ([]projection.Result, error) {
	if !c.exact {
		return nil, c.Deliver(ctx, events)
	}
	res, err := c.Processor.Process(ctx, projection.Batch{Events: events, Source: "projectiontest"})
	if err != nil {
		return nil, err
	}
	if len(res) != len(events) {
		return nil, fmt.Errorf("projectiontest: Process returned %d results for %d events", len(res), len(events))
	}
	return res, nil
}

// expect checks, when results are known, that the outcome of res[i] is one
// of want.
func expect(res []projection.Result, i int, e aggregate.Event, want ...projection.Outcome) error {
	if res == nil {
		return nil
	}
	for _, w := range want {
		if res[i].Outcome == w {
			return nil
		}
	}
	return fmt.Errorf("projectiontest: %s v%d: outcome %v (%v), want one of %v", e.Aggregate, e.Version, res[i].Outcome, res[i].Err, want)
}

// randomSchedule delivers a shuffled stream with duplicates, in random
// batches, from concurrent workers.
func (r *runner) randomSchedule(t *testing.T, seed uint64) {
	c, ctx := r.newCase(t)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	events := r.s.Generate(rng, r.f.Aggregates, r.f.Versions)
	deliveries := withDuplicates(rng, events, r.f.Duplicates)
	batches := streamtest.Batches(rng, deliveries, r.f.MaxBatch)
	began := time.Now()
	require.NoError(t, Deliver(ctx, batches, r.f.Workers, func(ctx context.Context, b []aggregate.Event) error {
		_, err := c.deliver(ctx, b)
		return err
	}), "seed %d", seed)
	t.Logf("seed %d: %d events, %d deliveries in %d batches by %d workers in %v",
		seed, len(events), len(deliveries), len(batches), r.f.Workers, time.Since(began).Round(time.Millisecond))
	verify(t, c, events, len(deliveries))
}

// partitioned delivers the stream in order by Features.Workers workers,
// each aggregate to one of them (as a source partitioned by aggregate
// does), each worker its aggregates' events in stream order, in batches of
// up to MaxBatch: the workers' batches touch different aggregates but the
// same shared rows of the read model, at once. Besides the read model,
// verify requires that no transaction deadlocked.
func (r *runner) partitioned(t *testing.T) {
	c, ctx := r.newCase(t)
	rng := rand.New(rand.NewPCG(r.f.Seed, 0x9a27))
	events := r.s.Generate(rng, r.f.Aggregates, r.f.Versions)
	streams := make([][]aggregate.Event, r.f.Workers)
	for _, e := range events {
		h := fnv.New32a()
		h.Write([]byte(e.Aggregate))
		w := int(h.Sum32() % uint32(r.f.Workers))
		streams[w] = append(streams[w], e)
	}
	g, gctx := errgroup.WithContext(ctx)
	for w, s := range streams {
		batches := streamtest.Batches(rand.New(rand.NewPCG(r.f.Seed, uint64(w))), s, r.f.MaxBatch)
		g.Go(func() error {
			for _, b := range batches {
				res, err := c.deliver(gctx, b)
				if err != nil {
					return fmt.Errorf("worker %d: %w", w, err)
				}
				for i, e := range b {
					if err := expect(res, i, e, projection.Applied); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	verify(t, c, events, len(events))
}

// reversed delivers every aggregate's versions last to first. Each
// aggregate belongs to one worker, which delivers its aggregates' reversed
// streams interleaved, in batches that mix aggregates; the workers run
// concurrently.
func (r *runner) reversed(t *testing.T) {
	c, ctx := r.newCase(t)
	rng := rand.New(rand.NewPCG(r.f.Seed, 0x7e7e))
	events := r.s.Generate(rng, r.f.Aggregates, r.f.Versions)
	streams := byAggregate(events)
	perWorker := make([][][]aggregate.Event, r.f.Workers)
	for i, s := range streams {
		rev := make([]aggregate.Event, len(s))
		for k, e := range s {
			rev[len(s)-1-k] = e
		}
		perWorker[i%r.f.Workers] = append(perWorker[i%r.f.Workers], rev)
	}
	maxBatch := min(r.f.MaxBatch, 50)
	work := make([][][]aggregate.Event, r.f.Workers)
	for w, ss := range perWorker {
		work[w] = streamtest.Batches(rng, interleave(rng, ss), maxBatch)
	}
	errs := make([]error, r.f.Workers)
	var wg sync.WaitGroup
	for w := range work {
		wg.Go(func() {
			for _, b := range work[w] {
				if _, err := c.deliver(ctx, b); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	if c.exact {
		require.Positive(t, c.Processor.Counts()[c.Processor.Projections()[0]].Deliveries[projection.Parked],
			"reversed deliveries must park")
	}
	verify(t, c, events, len(events))
}

// oneAggregateInParallel delivers every version of one aggregate, twice,
// each delivery from its own goroutine, for a few aggregates in turn.
func (r *runner) oneAggregateInParallel(t *testing.T) {
	c, ctx := r.newCase(t)
	const rounds = 4
	versions := max(r.f.Versions, 5)
	events := r.s.Generate(rand.New(rand.NewPCG(r.f.Seed, 0x0a11)), rounds, versions)
	total := 0
	for _, s := range byAggregate(events) {
		ds := append(append([]aggregate.Event{}, s...), s...)
		total += len(ds)
		out, err := deliverAtOnce(ctx, c, ds)
		require.NoError(t, err)
		if c.exact {
			// Of the two copies of each version, exactly one was applied or
			// parked; the other is a duplicate.
			for k, e := range s {
				a, b := out[k], out[k+len(s)]
				if a == projection.Duplicate {
					a, b = b, a
				}
				require.Contains(t, []projection.Outcome{projection.Applied, projection.Parked}, a, "%s v%d", e.Aggregate, e.Version)
				require.Equal(t, projection.Duplicate, b, "%s v%d", e.Aggregate, e.Version)
			}
		}
	}
	verify(t, c, events, total)
}

// duplicatesOfParked delivers versions 3…N twice (and again) before 2 and 1.
func (r *runner) duplicatesOfParked(t *testing.T) {
	c, ctx := r.newCase(t)
	const aggregates = 10
	versions := max(r.f.Versions, 5)
	events := r.s.Generate(rand.New(rand.NewPCG(r.f.Seed, 0xd0d0)), aggregates, versions)
	streams := byAggregate(events)
	counts := make([]int, len(streams))
	errs := make([]error, len(streams))
	var wg sync.WaitGroup
	for a, s := range streams {
		rng := rand.New(rand.NewPCG(r.f.Seed, uint64(a)))
		wg.Go(func() {
			counts[a], errs[a] = duplicatesOfParked(ctx, c, rng, s)
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	total := 0
	for _, n := range counts {
		total += n
	}
	verify(t, c, events, total)
}

func duplicatesOfParked(ctx context.Context, c *tcase, rng *rand.Rand, s []aggregate.Event) (int, error) {
	n := 0
	step := func(batch []aggregate.Event, want projection.Outcome) error {
		res, err := c.deliver(ctx, batch)
		if err != nil {
			return err
		}
		n += len(batch)
		for i, e := range batch {
			if err := expect(res, i, e, want); err != nil {
				return err
			}
		}
		return nil
	}
	later := shuffled(rng, s[2:])
	for _, e := range later { // v3…vN, one by one: parked
		if err := step([]aggregate.Event{e}, projection.Parked); err != nil {
			return n, err
		}
	}
	// Again, twice each, in one batch: duplicates of parked events.
	if err := step(shuffled(rng, append(append([]aggregate.Event{}, later...), later...)), projection.Duplicate); err != nil {
		return n, err
	}
	for _, e := range later { // and one by one
		if err := step([]aggregate.Event{e}, projection.Duplicate); err != nil {
			return n, err
		}
	}
	if err := step(s[1:2], projection.Parked); err != nil { // v2
		return n, err
	}
	if err := step(shuffled(rng, s[1:]), projection.Duplicate); err != nil {
		return n, err
	}
	if err := step(s[:1], projection.Applied); err != nil { // v1 drains v2…vN
		return n, err
	}
	return n, step(shuffled(rng, s), projection.Duplicate)
}

// sameEventConcurrently delivers each version of one aggregate from n
// goroutines at once, version after version: 1 (the version row does not
// exist yet), 2 (it exists), 4 (parked: one Parked, the rest duplicates) and
// 3 (applied, draining 4).
func (r *runner) sameEventConcurrently(t *testing.T, n int) {
	c, ctx := r.newCase(t)
	events := r.s.Generate(rand.New(rand.NewPCG(r.f.Seed, uint64(n))), 1, 4)
	for _, k := range []int{0, 1, 3, 2} {
		e := events[k]
		out, err := deliverAtOnce(ctx, c, slices.Repeat([]aggregate.Event{e}, n))
		require.NoError(t, err)
		if c.exact {
			want := projection.Applied
			if e.Version == 4 {
				want = projection.Parked
			}
			effects := 0
			for _, o := range out {
				if o == want {
					effects++
				} else {
					require.Equal(t, projection.Duplicate, o, "v%d", e.Version)
				}
			}
			require.Equal(t, 1, effects, "v%d: exactly one delivery is %v", e.Version, want)
		}
		if e.Version <= 2 {
			c.Check(t, events[:e.Version])
		}
	}
	verify(t, c, events, 4*n)
}

// longAggregates delivers a few aggregates with many versions each (the
// processor keeps their applied logs in pages that move to the applied
// table as they fill): the first half of every aggregate's versions in
// stream order, in small batches that Workers goroutines each deliver all of,
// in the same order, racing for every batch; then the rest shuffled, with
// duplicates, in random batches from the shared queue.
func (r *runner) longAggregates(t *testing.T) {
	c, ctx := r.newCase(t)
	rng := rand.New(rand.NewPCG(r.f.Seed, 0x1096))
	versions := max(6*r.f.Versions, 50)
	events := r.s.Generate(rng, max(r.f.Aggregates/100, 5), versions)
	var first, rest []aggregate.Event
	for _, e := range events {
		if e.Version <= int64(versions/2) {
			first = append(first, e)
		} else {
			rest = append(rest, e)
		}
	}
	batches := streamtest.Batches(rng, first, 20)
	g, gctx := errgroup.WithContext(ctx)
	for range r.f.Workers {
		g.Go(func() error {
			for _, b := range batches {
				if _, err := c.deliver(gctx, b); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	deliveries := withDuplicates(rng, rest, r.f.Duplicates)
	require.NoError(t, Deliver(ctx, streamtest.Batches(rng, deliveries, 50), r.f.Workers, func(ctx context.Context, b []aggregate.Event) error {
		_, err := c.deliver(ctx, b)
		return err
	}))
	verify(t, c, events, r.f.Workers*len(first)+len(deliveries))
}
