package projectiontest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/inorder/inorder/aggregate"
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
	t.Run("ReversedPerAggregate", func(t *testing.T) {
		t.Parallel()
		r.reversed(t)
	})
	t.Run("OneAggregateInParallel", func(t *testing.T) {
		t.Parallel()
		r.oneAggregateInParallel(t)
	})
	t.Run("DuplicatesOfParked", func(t *testing.T) {
		t.Parallel()
		r.duplicatesOfParked(t)
	})
	t.Run("ArrivalBetweenParkAndDrain", func(t *testing.T) {
		t.Parallel()
		r.arrivalBetweenParkAndDrain(t)
	})
	t.Run("LongAggregates", func(t *testing.T) {
		t.Parallel()
		r.longAggregates(t)
	})
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
	batches := split(rng, deliveries, r.f.MaxBatch)
	began := time.Now()
	require.NoError(t, Deliver(ctx, batches, r.f.Workers, func(ctx context.Context, b []aggregate.Event) error {
		_, err := c.deliver(ctx, b)
		return err
	}), "seed %d", seed)
	t.Logf("seed %d: %d events, %d deliveries in %d batches by %d workers in %v",
		seed, len(events), len(deliveries), len(batches), r.f.Workers, time.Since(began).Round(time.Millisecond))
	verify(t, c, events, len(deliveries))
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
		work[w] = split(rng, interleave(rng, ss), maxBatch)
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
	batches := split(rng, first, 20)
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
	require.NoError(t, Deliver(ctx, split(rng, deliveries, 50), r.f.Workers, func(ctx context.Context, b []aggregate.Event) error {
		_, err := c.deliver(ctx, b)
		return err
	}))
	verify(t, c, events, r.f.Workers*len(first)+len(deliveries))
}

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

// verify checks the read model, the gate's tables and the processor's
// counts after events were delivered (deliveries times in all, counting
// duplicates).
func verify(t *testing.T, c *tcase, events []aggregate.Event, deliveries int) {
	t.Helper()
	c.Check(t, events)
	RequireSettled(t, c.Processor, events)

	distinct := int64(len(events))
	counts := c.Processor.Counts()
	for _, name := range c.Processor.Projections() {
		n := counts[name]
		d := n.Deliveries
		require.Equal(t, distinct, n.Applied(), "%s: Counts.Applied, every event once: %+v", name, n)
		require.Equal(t, distinct, d[projection.Applied]+d[projection.Parked], "%s: one first delivery per event: %+v", name, n)
		require.Equal(t, d[projection.Parked], n.Drained, "%s: every parked delivery drained: %+v", name, n)
		for _, o := range []projection.Outcome{projection.Conflict, projection.Quarantined, projection.Rejected} {
			require.Zero(t, d[o], "%s: %v deliveries: %+v", name, o, n)
		}
		if c.exact {
			require.Equal(t, int64(deliveries)-distinct, d[projection.Duplicate], "%s: duplicates: %+v", name, n)
		}
	}
}

// RequireSettled asserts that the gate's tables of p's projections are
// settled after the distinct events of a stream (each (aggregate, version)
// once) were all delivered: the applied log holds each of them, every
// version row is at its aggregate's last version, and nothing is parked,
// blocked, quarantined, in conflict or rejected. It reads the tables, not
// p's counts, so it also checks what other processes did to the schema.
func RequireSettled(t testing.TB, p *projection.Processor, events []aggregate.Event) {
	t.Helper()
	ctx := context.Background()
	last := map[string]int64{}
	for _, e := range events {
		last[e.Aggregate] = max(last[e.Aggregate], e.Version)
	}
	st, err := p.Status(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, st.Rejected.Total, "rejected deliveries")
	for _, s := range st.Projections {
		name := s.Name
		require.Zero(t, s.Parked, "%s: parked leftovers", name)
		require.Zero(t, s.Quarantined, "%s: quarantined events", name)
		require.Zero(t, s.Conflicts+s.ConflictsAcknowledged, "%s: conflicts", name)
		requireAppliedLog(t, p, name, events)

		got := map[string]int64{}
		var stuck []string
		for after := ""; ; {
			page, err := p.Aggregates(ctx, projection.ListOptions{Projection: name, After: after, Limit: settledPage})
			require.NoError(t, err)
			for _, a := range page {
				got[a.Aggregate] = a.Version
				if a.Parked != 0 || a.Quarantined {
					stuck = append(stuck, fmt.Sprintf("%s (parked %d, quarantined %t)", a.Aggregate, a.Parked, a.Quarantined))
				}
			}
			if len(page) < settledPage {
				break
			}
			after = page[len(page)-1].Aggregate
		}
		require.Empty(t, stuck, "%s: aggregates with parked or quarantined events", name)
		require.Equal(t, last, got, "%s: every aggregate at its last version", name)
	}
}

// settledPage is the page size RequireSettled reads the gate state in.
const settledPage = 10_000

// requireAppliedLog asserts that the applied log of projection name holds
// each of events once, with its hash, and nothing else. (Ids are compared
// only for events that carry one: a source may give events ids of its own,
// as EventStoreDB does.)
func requireAppliedLog(t testing.TB, p *projection.Processor, name string, events []aggregate.Event) {
	t.Helper()
	type key struct {
		agg     string
		version int64
	}
	type entry struct {
		id   string
		hash string
	}
	got := map[key]entry{}
	var dup []key
	var entries []projection.AppliedEntry
	for after := ""; ; {
		page, err := p.AppliedLog(context.Background(), projection.ListOptions{Projection: name, After: after, Limit: settledPage})
		require.NoError(t, err)
		if len(page) < settledPage {
			entries = append(entries, page...)
			break
		}
		// The page may end inside an aggregate: keep whole aggregates and
		// read the last one again with the next page.
		lastAgg := page[len(page)-1].Aggregate
		cut := len(page)
		for cut > 0 && page[cut-1].Aggregate == lastAgg {
			cut--
		}
		require.Positive(t, cut, "%s: one aggregate's applied log is longer than a page", name)
		entries = append(entries, page[:cut]...)
		after = page[cut-1].Aggregate
	}
	for _, a := range entries {
		k := key{a.Aggregate, a.Version}
		e := entry{id: a.EventID}
		if a.EventID == "" {
			t.Fatalf("%s v%d: empty id in the applied log", k.agg, k.version)
		}
		if _, ok := got[k]; ok {
			dup = append(dup, k)
		}
		e.hash = fmt.Sprintf("%x", a.Hash)
		got[k] = e
	}
	require.Empty(t, dup, "%s: versions twice in the applied log", name)
	want := make(map[key]entry, len(events))
	for _, ev := range events {
		k := key{ev.Aggregate, ev.Version}
		want[k] = entry{ev.ID, fmt.Sprintf("%x", ev.Hash())}
		if g, ok := got[k]; ok && ev.ID == "" {
			g.id = ""
			got[k] = g
		}
	}
	if len(want) == len(got) && reflect.DeepEqual(want, got) {
		return
	}
	var missing, extra, wrong []string
	for k, w := range want {
		switch g, ok := got[k]; {
		case !ok:
			missing = append(missing, fmt.Sprintf("%s v%d", k.agg, k.version))
		case g != w:
			wrong = append(wrong, fmt.Sprintf("%s v%d: %+v, want %+v", k.agg, k.version, g, w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra = append(extra, fmt.Sprintf("%s v%d", k.agg, k.version))
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	sort.Strings(wrong)
	t.Fatalf("%s: applied log differs from the events: %d missing %v, %d extra %v, %d wrong %v", name,
		len(missing), head(missing), len(extra), head(extra), len(wrong), head(wrong))
}

// head returns the first few of xs.
func head(xs []string) []string { return xs[:min(len(xs), 5)] }

// withDuplicates returns events plus exact copies of a random share of
// them (drawn with replacement), shuffled.
func withDuplicates(rng *rand.Rand, events []aggregate.Event, share float64) []aggregate.Event {
	extra := int(float64(len(events))*share + 0.999)
	out := make([]aggregate.Event, 0, len(events)+extra)
	out = append(out, events...)
	for range extra {
		out = append(out, events[rng.IntN(len(events))])
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// split cuts events into consecutive batches of random sizes in 1…maxBatch.
func split(rng *rand.Rand, events []aggregate.Event, maxBatch int) [][]aggregate.Event {
	var out [][]aggregate.Event
	for len(events) > 0 {
		n := min(1+rng.IntN(maxBatch), len(events))
		out = append(out, events[:n:n])
		events = events[n:]
	}
	return out
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
