package projection_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

type bundle struct {
	db     *pgtest.DB
	proc   *projection.Processor
	ledger *ledger.Projection
}

func setup(t *testing.T, cfg *projection.Config) *bundle {
	t.Helper()
	return setupLedger(t, cfg, nil)
}

// setupRows is setup with the ledger keeping its gate state in version rows
// (not inline).
func setupRows(t *testing.T, cfg *projection.Config) *bundle {
	t.Helper()
	return setupLedger(t, cfg, &ledger.Options{VersionRows: true})
}

func setupLedger(t *testing.T, cfg *projection.Config, opts *ledger.Options) *bundle {
	t.Helper()
	return setupWith(t, cfg, opts)
}

// setupWith is setupLedger with more projections beside the ledger.
func setupWith(t *testing.T, cfg *projection.Config, opts *ledger.Options, more ...projection.Projection) *bundle {
	t.Helper()
	return setupIn(t, pgtest.NewMigrated(t), cfg, opts, more...)
}

// setupIn is setupWith on db.
func setupIn(t *testing.T, db *pgtest.DB, cfg *projection.Config, opts *ledger.Options, more ...projection.Projection) *bundle {
	t.Helper()
	if cfg == nil {
		cfg = &projection.Config{}
	}
	cfg.Schema = db.Schema
	l := ledger.New(opts)
	proc, err := projection.New(db.Pool, cfg, append([]projection.Projection{l}, more...)...)
	require.NoError(t, err)
	require.NoError(t, proc.Setup(context.Background()))
	return &bundle{db: db, proc: proc, ledger: l}
}

func (b *bundle) requireFold(t *testing.T, events []aggregate.Event) {
	t.Helper()
	ledgertest.RequireFoldOn(t, b.db, b.ledger, events)
}

func outcomes(rs []projection.Result) []projection.Outcome {
	out := make([]projection.Outcome, len(rs))
	for i, r := range rs {
		out[i] = r.Outcome
	}
	return out
}

// requireEvery requires that every result has the outcome want.
func requireEvery(t *testing.T, want projection.Outcome, rs []projection.Result) {
	t.Helper()
	for _, r := range rs {
		require.Equal(t, want, r.Outcome)
	}
}

// The outcomes, short, for the tables of outcomes the tests expect.
const (
	A = projection.Applied
	P = projection.Parked
	D = projection.Duplicate
	C = projection.Conflict
	Q = projection.Quarantined
)

func TestProcessor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("InOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		events := ledger.Generate(rand.New(rand.NewPCG(1, 2)), 20, 5)
		res, err := b.proc.Process(ctx, projection.Batch{Events: events})
		require.NoError(t, err)
		requireEvery(t, A, res)
		b.requireFold(t, events)
	})

	t.Run("ReversedParksThenDrains", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		events := ledger.Generate(rand.New(rand.NewPCG(3, 4)), 1, 5)
		for i := 4; i >= 1; i-- {
			res, err := b.proc.Process(ctx, projection.Batch{Events: events[i : i+1]})
			require.NoError(t, err)
			require.Equal(t, []projection.Outcome{P}, outcomes(res))
		}
		res, err := b.proc.Process(ctx, projection.Batch{Events: events[:1]})
		require.NoError(t, err)
		require.Equal(t, []projection.Outcome{A}, outcomes(res))
		b.requireFold(t, events)
		require.EqualValues(t, 4, b.proc.Counts()["ledger"].Drained)
		var parked int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM parked`).Scan(&parked))
		require.Zero(t, parked)
	})

	t.Run("OneBatchAnyOrderWithDuplicates", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		events := ledger.Generate(rand.New(rand.NewPCG(5, 6)), 1, 4)
		batch := []aggregate.Event{events[3], events[1], events[0], events[1], events[2]}
		res, err := b.proc.Process(ctx, projection.Batch{Events: batch})
		require.NoError(t, err)
		require.Equal(t, []projection.Outcome{A, A, A, D, A}, outcomes(res))
		b.requireFold(t, events)
	})

	t.Run("DuplicatesAndConflicts", func(t *testing.T) {
		t.Parallel()
		t.Run("inline", func(t *testing.T) { t.Parallel(); duplicatesAndConflicts(t, setup(t, nil), true) })
		t.Run("version-rows", func(t *testing.T) { t.Parallel(); duplicatesAndConflicts(t, setupRows(t, nil), false) })
	})

	t.Run("RejectsAndKeepsBadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &projection.Config{Limits: aggregate.Limits{MaxPayload: 64, Types: ledger.Types}})
		good := ledger.Generate(rand.New(rand.NewPCG(9, 10)), 1, 1)[0]
		bad := []struct {
			e   aggregate.Event
			err error
		}{
			{aggregate.Event{Version: 1, Type: ledger.Approved, Data: []byte(`{}`)}, aggregate.ErrEmptyAggregate},
			{aggregate.Event{Aggregate: "p", Version: 0, Type: ledger.Approved, Data: []byte(`{}`)}, aggregate.ErrBadVersion},
			{aggregate.Event{Aggregate: "p", Version: 1, Type: ledger.Approved, Data: []byte(`{`)}, aggregate.ErrInvalidJSON},
			{aggregate.Event{Aggregate: "p", Version: 1, Type: "payment.teleported", Data: []byte(`{}`)}, aggregate.ErrUnknownType},
			{aggregate.Event{Aggregate: "p", Version: 1, Type: ledger.Approved, Data: []byte(`"` + string(make([]byte, 100)) + `"`)}, aggregate.ErrPayloadTooLarge},
		}
		batch := []aggregate.Event{good}
		for _, c := range bad {
			batch = append(batch, c.e)
		}
		res, err := b.proc.Process(ctx, projection.Batch{Events: batch, Source: "test"})
		require.NoError(t, err)
		require.Equal(t, A, res[0].Outcome)
		for i, c := range bad {
			require.Equal(t, projection.Rejected, res[i+1].Outcome)
			require.ErrorIs(t, res[i+1].Err, c.err)
			var ve *aggregate.ValidationError
			require.ErrorAs(t, res[i+1].Err, &ve)
		}
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM rejected WHERE source = 'test'`).Scan(&n))
		require.Equal(t, len(bad), n)
		// Redelivering them counts, it does not duplicate.
		_, err = b.proc.Process(ctx, projection.Batch{Events: batch, Source: "test"})
		require.NoError(t, err)
		var rows, count int64
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*), sum(count) FROM rejected`).Scan(&rows, &count))
		require.EqualValues(t, len(bad), rows)
		require.EqualValues(t, 2*len(bad), count)
	})
}

// TestSameEventConcurrently is the seed's test: one event handled at once by
// many goroutines has exactly one effect. It runs for a first version (the
// version row does not exist yet) and for later versions (the row exists, so
// only its lock serialises the deliveries).
func TestSameEventConcurrently(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 8, 64} {
		t.Run(fmtInt(n), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			events := ledger.Generate(rand.New(rand.NewPCG(uint64(n), 1)), 1, 3)
			for v, e := range events {
				var wg sync.WaitGroup
				res := make([]projection.Outcome, n)
				errs := make([]error, n)
				start := make(chan struct{})
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						r, err := b.proc.Process(context.Background(), projection.Batch{Events: []aggregate.Event{e}})
						errs[i] = err
						if err == nil {
							res[i] = r[0].Outcome
						}
					}()
				}
				close(start)
				wg.Wait()
				applied := 0
				for i := range n {
					require.NoError(t, errs[i])
					if res[i] == projection.Applied {
						applied++
					} else {
						require.Equal(t, projection.Duplicate, res[i])
					}
				}
				require.Equal(t, 1, applied, "version %d", v+1)
				if v == 0 {
					var legs int
					require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM ledger_legs`).Scan(&legs))
					require.Equal(t, 2, legs, "exactly the two legs of one transaction")
				}
				b.requireFold(t, events[:v+1])
			}
		})
	}
}

// duplicatesAndConflicts is TestProcessor/DuplicatesAndConflicts on b,
// whose ledger is inline or not.
func duplicatesAndConflicts(t *testing.T, b *bundle, inline bool) {
	ctx := context.Background()
	const (
		D = projection.Duplicate
		C = projection.Conflict
	)

	events := ledger.Generate(rand.New(rand.NewPCG(7, 8)), 1, 4)
	_, err := b.proc.Process(ctx, projection.Batch{Events: events[:2]})
	require.NoError(t, err)
	_, err = b.proc.Process(ctx, projection.Batch{Events: events[3:4]}) // parked
	require.NoError(t, err)

	stale := events[0]
	otherID := events[1]
	otherID.ID = "something-else"
	otherPayload := events[3]
	otherPayload.Data = []byte(`{"amount": 1}`)
	res, err := b.proc.Process(ctx, projection.Batch{Events: []aggregate.Event{stale, otherID, events[3], otherPayload, otherPayload}})
	require.NoError(t, err)
	require.Equal(t, []projection.Outcome{D, C, D, C, C}, outcomes(res))

	var n, count int64
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*), sum(count) FROM conflicts`).Scan(&n, &count))
	require.EqualValues(t, 2, n)
	require.EqualValues(t, 3, count)
	var state, existing, incoming string
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT existing_state, existing_event_id, incoming_event_id FROM conflicts WHERE version = 2`).
		Scan(&state, &existing, &incoming))
	require.Equal(t, "applied", state)
	if inline {
		// The row's log keeps an entry of the version, not its id.
		var hash []byte
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT existing_hash FROM conflicts WHERE version = 2`).Scan(&hash))
		require.Equal(t, projection.InlineEntry(events[1]), hash)
	} else {
		require.Equal(t, events[1].StableID(), existing)
	}
	require.Equal(t, "something-else", incoming)

	_, err = b.proc.Process(ctx, projection.Batch{Events: events[2:3]})
	require.NoError(t, err)
	b.requireFold(t, events)
}

func fmtInt(n int) string { return fmt.Sprintf("goroutines=%d", n) }

// TestSpeculation covers the batches that write their version rows without
// reading them first (a contiguous run per aggregate) when the assumption
// behind it is wrong: each must fall back to the read and end as if read
// first, and no row the speculative write inserted by mistake may survive.
func TestSpeculation(t *testing.T) {
	t.Parallel()
	for _, rows := range []bool{false, true} {
		name := "inline"
		if rows {
			name = "version-rows"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testSpeculation(t, rows)
		})
	}
}

// testSpeculation is TestSpeculation of the inline ledger, or with rows of
// the ledger that keeps version rows.
func testSpeculation(t *testing.T, rows bool) {
	mk := setup
	kind := "batch"
	if rows {
		mk, kind = setupRows, "batch-rows"
	}
	ctx := context.Background()
	// misses returns the speculations that fell back since the last call.
	misses := func(b *bundle) func() (spec, miss int64) {
		var s0, m0 int64
		return func() (int64, int64) {
			s, m := projection.Speculation(b.proc)
			defer func() { s0, m0 = s, m }()
			return s - s0, m - m0
		}
	}
	noBadRows := func(t *testing.T, b *bundle) {
		t.Helper()
		var n int
		// Inline, the fast path's version rows of new aggregates stay at
		// rev 0 (inline_gate.go).
		least := 1
		if !rows {
			least = 0
		}
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM versions WHERE rev < $1`, least).Scan(&n))
		require.Zero(t, n, "version rows left by a wrong speculation")
	}
	process := func(t *testing.T, b *bundle, events ...aggregate.Event) []projection.Outcome {
		t.Helper()
		res, err := b.proc.Process(ctx, projection.Batch{Events: events})
		require.NoError(t, err)
		return outcomes(res)
	}

	t.Run("InOrderBatchesSpeculate", func(t *testing.T) {
		t.Parallel()
		b := mk(t, nil)
		delta := misses(b)
		events := ledger.Generate(rand.New(rand.NewPCG(11, 1)), 50, 6)
		for chunk := range slices.Chunk(events, 40) {
			for _, o := range process(t, b, chunk...) {
				require.Equal(t, A, o)
			}
		}
		spec, miss := delta()
		require.EqualValues(t, (len(events)+39)/40, spec, "every in-order batch speculates")
		require.Zero(t, miss)
		b.requireFold(t, events)
		noBadRows(t, b)
	})

	t.Run("MissingRow", func(t *testing.T) {
		t.Parallel()
		b := mk(t, nil)
		events := ledger.Generate(rand.New(rand.NewPCG(11, 2)), 1, 3)
		delta := misses(b)
		// 2..3 assume the row is at 1; it does not exist.
		require.Equal(t, []projection.Outcome{P, P}, process(t, b, events[1:]...))
		spec, miss := delta()
		require.Zero(t, spec)
		require.EqualValues(t, 1, miss)
		noBadRows(t, b)
		require.Equal(t, []projection.Outcome{A}, process(t, b, events[0]))
		b.requireFold(t, events)
	})

	t.Run("Redelivery", func(t *testing.T) {
		t.Parallel()
		b := mk(t, nil)
		events := ledger.Generate(rand.New(rand.NewPCG(11, 3)), 3, 3)
		process(t, b, events...)
		delta := misses(b)
		changed := events[len(events)-1]
		changed.Data = []byte(`{"amount": 7}`)
		got := process(t, b, append(slices.Clone(events[:len(events)-1]), changed)...)
		want := make([]projection.Outcome, len(events))
		for i := range want {
			want[i] = D
		}
		want[len(want)-1] = C
		require.Equal(t, want, got)
		_, miss := delta()
		require.EqualValues(t, 1, miss)
		b.requireFold(t, events)
		noBadRows(t, b)
	})

	t.Run("ParkedSuccessors", func(t *testing.T) {
		t.Parallel()
		b := mk(t, nil)
		events := ledger.Generate(rand.New(rand.NewPCG(11, 4)), 1, 5)
		// 4..5 park (the row is created at version 0 with 2 parked);
		// then 1..3 continue the row's version, but must drain 4..5, which
		// the speculative write does not do: it must fall back.
		require.Equal(t, []projection.Outcome{P, P}, process(t, b, events[3:]...))
		delta := misses(b)
		require.Equal(t, []projection.Outcome{A, A, A}, process(t, b, events[:3]...))
		spec, miss := delta()
		require.Zero(t, spec)
		require.EqualValues(t, 1, miss)
		require.EqualValues(t, 2, b.proc.Counts()["ledger"].Drained)
		b.requireFold(t, events)
		noBadRows(t, b)
	})

	t.Run("Quarantined", func(t *testing.T) {
		t.Parallel()
		events := ledger.Generate(rand.New(rand.NewPCG(11, 5)), 1, 4)
		agg := events[0].Aggregate
		ob := opLedger(t, opConfig(), kind, newOpFault(agg, 2))
		res, err := ob.proc.Process(ctx, projection.Batch{Events: events[:2]})
		require.NoError(t, err)
		require.Equal(t, []projection.Outcome{A, projection.Quarantined}, outcomes(res))
		// 2..4 continue the row's version (1), but 2 is quarantined.
		s0, m0 := projection.Speculation(ob.proc)
		res, err = ob.proc.Process(ctx, projection.Batch{Events: events[1:]})
		require.NoError(t, err)
		require.Equal(t, []projection.Outcome{projection.Quarantined, P, P}, outcomes(res))
		s1, m1 := projection.Speculation(ob.proc)
		require.EqualValues(t, 1, m1-m0, "speculated %d", s1-s0)
		ob.fault.on.Store(false)
		err = acted(ob.proc.RetryQuarantined(ctx, "ledger", agg, nil))
		require.NoError(t, err)
		ob.requireFold(t, events)
	})

	t.Run("QuarantinedOnAKnownRow", func(t *testing.T) {
		// The row is one the processor wrote: a speculative attempt vouches
		// for it from memory (inline) or speculates (version rows); the
		// handler fails before sending anything, and the event is
		// quarantined all the same, the rest of the batch parked behind it.
		t.Parallel()
		events := ledger.Generate(rand.New(rand.NewPCG(11, 7)), 1, 4)
		agg := events[0].Aggregate
		ob := opLedger(t, opConfig(), kind, newOpFault(agg, 2))
		res, err := ob.proc.Process(ctx, projection.Batch{Events: events[:1]})
		require.NoError(t, err)
		require.Equal(t, []projection.Outcome{A}, outcomes(res))
		res, err = ob.proc.Process(ctx, projection.Batch{Events: events[1:]})
		require.NoError(t, err)
		require.Equal(t, []projection.Outcome{projection.Quarantined, P, P}, outcomes(res))
		ob.fault.on.Store(false)
		require.NoError(t, acted(ob.proc.RetryQuarantined(ctx, "ledger", agg, nil)))
		ob.requireFold(t, events)
	})

	// Consecutive in-order batches of the same aggregates delivered at once
	// by many goroutines, each batch several times: one effect per event.
	t.Run("Concurrent", func(t *testing.T) {
		t.Parallel()
		b := mk(t, nil)
		events := ledger.Generate(rand.New(rand.NewPCG(11, 6)), 20, 8)
		chunks := slices.Collect(slices.Chunk(events, 16))
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 8*len(chunks))
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for k := range chunks {
					c := chunks[(k+w)%len(chunks)]
					if _, err := b.proc.Process(ctx, projection.Batch{Events: c}); err != nil {
						errs <- err
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		// Stragglers parked behind a version another goroutine applied
		// later are drained; nothing may be left.
		process(t, b, events...)
		b.requireFold(t, events)
		c := b.proc.Counts()["ledger"]
		require.EqualValues(t, len(events), c.Applied())
		require.Zero(t, c.Deliveries[C])
		noBadRows(t, b)
		var parked int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM parked`).Scan(&parked))
		require.Zero(t, parked)
	})
}
