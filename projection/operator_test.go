package projection_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// This file tests poison handling and the operator functions. Its helpers
// (prefixed op, in operator_helpers_test.go) are shared with
// inspect_test.go and rebuild_test.go.

func TestPoison(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"batch", "event"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			const poison = "pay-000007"
			events := ledger.Generate(rand.New(rand.NewPCG(11, 12)), 20, 6)
			b := opLedger(t, opConfig(), kind, newOpFault(poison, 3))

			// Versions 1–4 of every payment in one batch: the poisoned
			// payment is applied up to 2, quarantined at 3, and parks 4.
			first := slices.DeleteFunc(slices.Clone(events), func(e aggregate.Event) bool { return e.Version > 4 })
			res, err := b.proc.Process(ctx, projection.Batch{Events: first})
			require.NoError(t, err)
			for i, e := range first {
				want := projection.Applied
				if e.Aggregate == poison && e.Version == 3 {
					want = projection.Quarantined
				} else if e.Aggregate == poison && e.Version > 3 {
					want = projection.Parked
				}
				require.Equal(t, want, res[i].Outcome, "%s v%d", e.Aggregate, e.Version)
			}
			b.requireFold(t, opWithout(first, poison, 3))

			q, err := b.proc.Quarantined(ctx, projection.ListOptions{})
			require.NoError(t, err)
			require.Len(t, q, 1)
			require.Equal(t, "ledger", q[0].Projection)
			require.Equal(t, poison, q[0].Aggregate)
			require.EqualValues(t, 3, q[0].Version)
			require.Equal(t, aggregate.DefaultID(poison, 3), q[0].EventID)
			require.Contains(t, q[0].Error, errOpPoison.Error())
			require.Equal(t, 3, q[0].Attempts, "Config.MaxAttempts")
			v, err := b.proc.Version(ctx, "ledger", poison)
			require.NoError(t, err)
			require.EqualValues(t, 2, v)

			// Later versions keep parking; the quarantined event's
			// redelivery reports Quarantined, a parked one's Duplicate.
			pe := opOf(events, poison)
			second := slices.DeleteFunc(slices.Clone(events), func(e aggregate.Event) bool { return e.Version <= 4 })
			second = append(second, pe[2], pe[3])
			res, err = b.proc.Process(ctx, projection.Batch{Events: second})
			require.NoError(t, err)
			for i, e := range second {
				want := projection.Applied
				switch {
				case e.Aggregate != poison:
				case e.Version == 3:
					want = projection.Quarantined
				case e.Version == 4:
					want = projection.Duplicate
				default:
					want = projection.Parked
				}
				require.Equal(t, want, res[i].Outcome, "%s v%d", e.Aggregate, e.Version)
			}
			b.requireFold(t, opWithout(events, poison, 3))
			st := opStatus(t, b.proc, "ledger")
			require.EqualValues(t, 3, st.Parked)
			require.EqualValues(t, 1, st.ParkedAggregates)
			require.EqualValues(t, 1, st.Quarantined)

			// Fix the fault and retry: the quarantined event and its parked
			// successors apply in order.
			b.fault.on.Store(false)
			require.NoError(t, acted(b.proc.RetryQuarantined(ctx, "ledger", poison, nil)))
			b.requireFold(t, events)
			st = opStatus(t, b.proc, "ledger")
			require.Equal(t, projection.ProjectionStatus{Name: "ledger", Aggregates: 20, Events: int64(len(events))}, st)
			require.Zero(t, opCount(t, b.db, `SELECT count(*) FROM parked`))
			require.Zero(t, opCount(t, b.db, `SELECT count(*) FROM quarantine`))
			require.Zero(t, opCount(t, b.db, `SELECT count(*) FROM versions WHERE blocked OR parked <> 0`))
			require.Equal(t, []opLog{{Action: "retry", Projection: "ledger", Aggregate: poison, From: opPtr(2), To: opPtr(3)}},
				opLogRows(t, b.db, "retry"))
			require.EqualValues(t, 3, b.proc.Counts()["ledger"].Drained, "versions 4, 5 and 6")

			res, err = b.proc.Process(ctx, projection.Batch{Events: pe})
			require.NoError(t, err)
			requireEvery(t, projection.Duplicate, res)
			require.ErrorIs(t, acted(b.proc.RetryQuarantined(ctx, "ledger", poison, nil)), projection.ErrNotQuarantined)
		})
	}
}

func TestRetryQuarantinedStillFailing(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"batch", "event"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			const poison = "pay-000001"
			events := ledger.Generate(rand.New(rand.NewPCG(13, 14)), 3, 4)
			b := opLedger(t, opConfig(), kind, newOpFault(poison, 2))
			_, err := b.proc.Process(ctx, projection.Batch{Events: events})
			require.NoError(t, err)

			err = acted(b.proc.RetryQuarantined(ctx, "ledger", poison, nil))
			var he *projection.HandlerError
			require.ErrorAs(t, err, &he)
			require.Equal(t, "ledger", he.Projection)
			require.Equal(t, poison, he.Aggregate)
			require.EqualValues(t, 2, he.Version)
			require.ErrorIs(t, err, errOpPoison)

			q, err := b.proc.Quarantined(ctx, projection.ListOptions{Aggregate: poison})
			require.NoError(t, err)
			require.Len(t, q, 1)
			require.EqualValues(t, 2, q[0].Version)
			require.Equal(t, 4, q[0].Attempts, "3 in Process, 1 in the retry")
			require.False(t, q[0].LastAttemptAt.Before(q[0].QuarantinedAt))
			v, err := b.proc.Version(ctx, "ledger", poison)
			require.NoError(t, err)
			require.EqualValues(t, 1, v)
			require.EqualValues(t, 2, opStatus(t, b.proc, "ledger").Parked)
			b.requireFold(t, opWithout(events, poison, 2))

			b.fault.on.Store(false)
			require.NoError(t, acted(b.proc.RetryQuarantined(ctx, "ledger", poison, nil)))
			b.requireFold(t, events)
			require.Len(t, opLogRows(t, b.db, "retry"), 2, "failed retries are logged too")
		})
	}
}

func TestSkipQuarantined(t *testing.T) {
	t.Parallel()
	ctx := t.Context()

	t.Run("DrainsSuccessors", func(t *testing.T) {
		t.Parallel()
		db, proc := opJournalBundle(t, newOpFault("a", 3))
		events := append(opNotes("a", 1, 6), opNotes("b", 1, 3)...)
		_, err := proc.Process(ctx, projection.Batch{Events: opShuffle(1, events)})
		require.NoError(t, err)
		require.Equal(t, map[string][]int64{"a": {1, 2}, "b": {1, 2, 3}}, opJournalModel(t, db, "journal"))

		require.ErrorIs(t, acted(proc.SkipQuarantined(ctx, "nope", "a", &projection.ActionOptions{Reason: "x"})), projection.ErrUnknownProjection)
		require.ErrorIs(t, acted(proc.SkipQuarantined(ctx, "journal", "b", &projection.ActionOptions{Reason: "x"})), projection.ErrNotQuarantined)
		err = acted(proc.SkipQuarantined(ctx, "journal", "zzz", &projection.ActionOptions{Reason: "x"}))
		require.ErrorIs(t, err, projection.ErrNotFound)
		require.Equal(t, 1, strings.Count(err.Error(), "journal"), "the projection named once: %v", err)

		require.NoError(t, acted(proc.SkipQuarantined(ctx, "journal", "a", &projection.ActionOptions{Reason: "corrupt payload, INC-1"})))
		skipped := slices.DeleteFunc(slices.Clone(events), func(e aggregate.Event) bool { return e.Aggregate == "a" && e.Version == 3 })
		require.Equal(t, opJournalFold(skipped), opJournalModel(t, db, "journal"))
		v, err := proc.Version(ctx, "journal", "a")
		require.NoError(t, err)
		require.EqualValues(t, 6, v)
		require.Zero(t, opCount(t, db, `SELECT count(*) FROM parked`))
		require.Zero(t, opCount(t, db, `SELECT count(*) FROM quarantine`))
		require.Zero(t, opCount(t, db, `SELECT count(*) FROM versions WHERE blocked OR parked <> 0`))
		require.Equal(t, []opLog{{Action: "skip", Projection: "journal", Aggregate: "a", From: opPtr(2), To: opPtr(3), Reason: "corrupt payload, INC-1"}},
			opLogRows(t, db, "skip"))
		require.ErrorIs(t, acted(proc.SkipQuarantined(ctx, "journal", "a", &projection.ActionOptions{Reason: "again"})), projection.ErrNotQuarantined)

		// The skipped event turning up again is a duplicate: it holds its
		// version. Another event claiming the version is a conflict with it.
		res, err := proc.Process(ctx, projection.Batch{Events: events[2:3]})
		require.NoError(t, err)
		require.Equal(t, projection.Duplicate, res[0].Outcome)
		cs, err := proc.Conflicts(ctx, projection.ListOptions{})
		require.NoError(t, err)
		require.Empty(t, cs, "a skipped event's redelivery raises no conflict")
		other := events[2]
		other.Data = []byte(`{"n": "something else"}`)
		res, err = proc.Process(ctx, projection.Batch{Events: []aggregate.Event{other}})
		require.NoError(t, err)
		require.Equal(t, projection.Conflict, res[0].Outcome)
		cs, err = proc.Conflicts(ctx, projection.ListOptions{})
		require.NoError(t, err)
		require.Len(t, cs, 1)
		require.Equal(t, "applied", cs[0].ExistingState)
		require.Equal(t, events[2].StableID(), cs[0].ExistingEventID)
		require.EqualValues(t, 3, cs[0].Version)
		require.Equal(t, opJournalFold(skipped), opJournalModel(t, db, "journal"))
	})

	// A parked successor that fails while the skip drains it is quarantined
	// in turn, and the rest stays parked behind it.
	t.Run("SuccessorFailsWhileDraining", func(t *testing.T) {
		t.Parallel()
		fault := newOpFault("a", 3, 4)
		db, proc := opJournalBundle(t, fault)
		events := opNotes("a", 1, 5)
		_, err := proc.Process(ctx, projection.Batch{Events: events})
		require.NoError(t, err)

		require.NoError(t, acted(proc.SkipQuarantined(ctx, "journal", "a", &projection.ActionOptions{Reason: "bad"})))
		q, err := proc.Quarantined(ctx, projection.ListOptions{})
		require.NoError(t, err)
		require.Len(t, q, 1)
		require.EqualValues(t, 4, q[0].Version)
		require.Equal(t, 1, q[0].Attempts)
		require.Contains(t, q[0].Error, errOpPoison.Error())
		v, err := proc.Version(ctx, "journal", "a")
		require.NoError(t, err)
		require.EqualValues(t, 3, v)
		st := opStatus(t, proc, "journal")
		require.EqualValues(t, 1, st.Parked)
		require.EqualValues(t, 1, st.Quarantined)
		require.Equal(t, map[string][]int64{"a": {1, 2}}, opJournalModel(t, db, "journal"))

		fault.on.Store(false)
		require.NoError(t, acted(proc.RetryQuarantined(ctx, "journal", "a", nil)))
		require.Equal(t, map[string][]int64{"a": {1, 2, 4, 5}}, opJournalModel(t, db, "journal"))
		require.Zero(t, opCount(t, db, `SELECT count(*) FROM versions WHERE blocked OR parked <> 0`))
	})
}

func TestDeclareGap(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, proc := opJournalBundle(t, newOpFault("b", 1))
	a := opNotes("a", 1, 6)
	// a: 1 and 2 applied, 3 withheld, 4 and 5 parked; b quarantined at 1.
	res, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{a[4], a[0], a[3], a[1], opNotes("b", 1, 1)[0]}})
	require.NoError(t, err)
	require.Equal(t, []projection.Outcome{projection.Parked, projection.Applied, projection.Parked, projection.Applied, projection.Quarantined},
		outcomes(res))

	for _, c := range []struct {
		name    string
		proj    string
		agg     string
		to      int64
		wantErr error
	}{
		{"ReachesParked", "journal", "a", 4, projection.ErrBadGap},
		{"CoversParked", "journal", "a", 5, projection.ErrBadGap},
		{"AlreadyApplied", "journal", "a", 2, projection.ErrBadGap},
		{"BelowApplied", "journal", "a", 1, projection.ErrBadGap},
		{"Quarantined", "journal", "b", 3, projection.ErrQuarantined},
		{"UnknownProjection", "nope", "a", 3, projection.ErrUnknownProjection},
		{"UnknownAggregate", "journal", "zzz", 3, projection.ErrNotFound},
	} {
		require.ErrorIs(t, acted(proc.DeclareGap(ctx, c.proj, c.agg, c.to, &projection.ActionOptions{Reason: "test"})), c.wantErr, c.name)
	}
	require.Equal(t, map[string][]int64{"a": {1, 2}}, opJournalModel(t, db, "journal"), "failed declarations change nothing")

	require.NoError(t, acted(proc.DeclareGap(ctx, "journal", "a", 3, &projection.ActionOptions{Reason: "deleted at the source"})))
	require.Equal(t, map[string][]int64{"a": {1, 2, 4, 5}}, opJournalModel(t, db, "journal"))
	v, err := proc.Version(ctx, "journal", "a")
	require.NoError(t, err)
	require.EqualValues(t, 5, v)
	require.Equal(t, []opLog{{Action: "declare-gap", Projection: "journal", Aggregate: "a", From: opPtr(2), To: opPtr(3), Reason: "deleted at the source"}},
		opLogRows(t, db, "declare-gap"))
	require.EqualValues(t, 0, opStatus(t, proc, "journal").Parked)

	// The declared-missing version arrives after all: a conflict with the
	// declaration. Later versions flow.
	res, err = proc.Process(ctx, projection.Batch{Events: []aggregate.Event{a[2], a[5]}})
	require.NoError(t, err)
	require.Equal(t, []projection.Outcome{projection.Conflict, projection.Applied}, outcomes(res))
	cs, err := proc.Conflicts(ctx, projection.ListOptions{Aggregate: "a"})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	require.Equal(t, "skipped", cs[0].ExistingState)
	require.Empty(t, cs[0].ExistingEventID)
	require.Equal(t, a[2].StableID(), cs[0].IncomingEventID)
	require.Equal(t, map[string][]int64{"a": {1, 2, 4, 5, 6}}, opJournalModel(t, db, "journal"))

	// A gap declared up to just before a parked version, further on.
	res, err = proc.Process(ctx, projection.Batch{Events: opNotes("a", 9, 9)})
	require.NoError(t, err)
	require.Equal(t, projection.Parked, res[0].Outcome)
	require.ErrorIs(t, acted(proc.DeclareGap(ctx, "journal", "a", 9, &projection.ActionOptions{Reason: "x"})), projection.ErrBadGap)
	require.NoError(t, acted(proc.DeclareGap(ctx, "journal", "a", 8, &projection.ActionOptions{Reason: "7 and 8 never existed"})))
	require.Equal(t, map[string][]int64{"a": {1, 2, 4, 5, 6, 9}}, opJournalModel(t, db, "journal"))
}

func TestReplayRejected(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	l := ledger.New(nil)
	// Authorizations carry ~60 bytes of data; the others far less.
	strict := opProcessor(t, db, &projection.Config{Limits: aggregate.Limits{MaxPayload: 40}}, l)
	relaxed := opProcessor(t, db, nil, l)

	events := ledger.Generate(rand.New(rand.NewPCG(15, 16)), 3, 3)
	res, err := strict.Process(ctx, projection.Batch{Events: events, Source: "test"})
	require.NoError(t, err)
	for i, e := range events {
		if e.Version == 1 {
			require.Equal(t, projection.Rejected, res[i].Outcome)
			require.ErrorIs(t, res[i].Err, aggregate.ErrPayloadTooLarge)
		} else {
			require.Equal(t, projection.Parked, res[i].Outcome)
		}
	}
	rejected, err := relaxed.Rejected(ctx, projection.ListOptions{})
	require.NoError(t, err)
	require.Len(t, rejected, 3)
	for _, r := range rejected {
		require.Equal(t, "payload_too_large", r.Reason)
		require.Equal(t, "test", r.Source)
		require.True(t, r.ReplayedAt.IsZero())
		res, err := relaxed.ReplayRejected(ctx, r.ID, nil)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"ledger": "applied"}, res.Outcomes)
	}
	ledgertest.RequireFoldOn(t, db, l, events)
	rejected, err = relaxed.Rejected(ctx, projection.ListOptions{})
	require.NoError(t, err)
	for _, r := range rejected {
		require.False(t, r.ReplayedAt.IsZero())
		require.Equal(t, "replayed", r.Resolution)
	}
	logs := opLogRows(t, db, "replay-rejected")
	require.Len(t, logs, 3)
	require.Equal(t, rejected[0].Aggregate, logs[0].Aggregate)
	require.Equal(t, fmt.Sprintf("rejected event %d", rejected[0].ID), logs[0].Reason)

	// Still invalid under the relaxed limits: it stays rejected.
	bad := aggregate.Event{Aggregate: "pay-x", Version: 1, Type: ledger.Authorized, Data: []byte(`{`)}
	_, err = strict.Process(ctx, projection.Batch{Events: []aggregate.Event{bad}, Source: "test"})
	require.NoError(t, err)
	rejected, err = relaxed.Rejected(ctx, projection.ListOptions{Aggregate: "pay-x"})
	require.NoError(t, err)
	require.Len(t, rejected, 1)
	r, err := relaxed.ReplayRejected(ctx, rejected[0].ID, nil)
	var ve *aggregate.ValidationError
	require.ErrorAs(t, err, &ve)
	require.ErrorIs(t, err, aggregate.ErrInvalidJSON)
	require.Nil(t, r.Outcomes, "fed nowhere")
	require.Contains(t, r.Message, "still invalid")
	rejected, err = relaxed.Rejected(ctx, projection.ListOptions{Aggregate: "pay-x"})
	require.NoError(t, err)
	require.Len(t, rejected, 1, "the same row")
	require.True(t, rejected[0].ReplayedAt.IsZero())
	require.True(t, rejected[0].ResolvedAt.IsZero(), "still pending")
	require.EqualValues(t, 1, rejected[0].Count, "a replay is not a delivery")
	require.Len(t, opLogRows(t, db, "replay-rejected"), 3)

	_, err = relaxed.ReplayRejected(ctx, 1<<40, nil)
	require.ErrorIs(t, err, projection.ErrNotFound)
}

// TestRetryQuarantinedConcurrently retries one quarantined event from many
// goroutines at once, while workers deliver other events: it is applied
// exactly once.
func TestRetryQuarantinedConcurrently(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const poison = "pay-000005"
	events := ledger.Generate(rand.New(rand.NewPCG(17, 18)), 40, 4)
	b := opLedger(t, opConfig(), "batch", newOpFault(poison, 2))
	var initial, rest []aggregate.Event
	for _, e := range events {
		if e.Aggregate == poison || e.Version <= 2 {
			initial = append(initial, e)
		} else {
			rest = append(rest, e)
		}
	}
	_, err := b.proc.Process(ctx, projection.Batch{Events: initial})
	require.NoError(t, err)
	require.EqualValues(t, 1, opStatus(t, b.proc, "ledger").Quarantined)
	b.fault.on.Store(false)

	const retriers = 8
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, retriers)
	for i := range retriers {
		wg.Go(func() {
			<-start
			errs[i] = acted(b.proc.RetryQuarantined(ctx, "ledger", poison, nil))
		})
	}
	batches := make(chan []aggregate.Event)
	workerErrs := make(chan error, 2)
	for range 2 {
		wg.Go(func() {
			<-start
			for batch := range batches {
				if _, err := b.proc.Process(ctx, projection.Batch{Events: batch}); err != nil {
					workerErrs <- err
					return
				}
			}
		})
	}
	close(start)
	for batch := range slices.Chunk(rest, 10) {
		batches <- batch
	}
	close(batches)
	wg.Wait()
	close(workerErrs)
	for err := range workerErrs {
		require.NoError(t, err)
	}

	succeeded := 0
	for _, err := range errs {
		if err == nil {
			succeeded++
		} else {
			require.ErrorIs(t, err, projection.ErrNotQuarantined)
		}
	}
	require.Equal(t, 1, succeeded)
	require.Len(t, opLogRows(t, b.db, "retry"), 1)
	b.requireFold(t, events)
	require.Equal(t, projection.ProjectionStatus{Name: "ledger", Aggregates: 40, Events: int64(len(events))}, opStatus(t, b.proc, "ledger"))
}

// TestPoisonDoesNotStallOthers delivers a large shuffled stream with one
// poisoned event through concurrent workers: every other aggregate
// completes.
func TestPoisonDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const poison = "pay-000123"
	const payments, versions = 500, 5
	events := ledger.Generate(rand.New(rand.NewPCG(19, 20)), payments, versions)
	b := opLedger(t, opConfig(), "batch", newOpFault(poison, 2))

	batches := make(chan []aggregate.Event)
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for batch := range batches {
				if _, err := b.proc.Process(ctx, projection.Batch{Events: batch}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for batch := range slices.Chunk(opShuffle(21, events), 100) {
		batches <- batch
	}
	close(batches)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	b.requireFold(t, opWithout(events, poison, 2))
	require.Equal(t, projection.ProjectionStatus{
		Name: "ledger", Aggregates: payments, Events: (payments-1)*versions + 1,
		Parked: versions - 2, ParkedAggregates: 1, OldestParked: opStatus(t, b.proc, "ledger").OldestParked,
		Quarantined: 1,
	}, opStatus(t, b.proc, "ledger"))
	q, err := b.proc.Quarantined(ctx, projection.ListOptions{Projection: "ledger"})
	require.NoError(t, err)
	require.Len(t, q, 1)
	require.Equal(t, poison, q[0].Aggregate)
	require.EqualValues(t, 2, q[0].Version)

	b.fault.on.Store(false)
	require.NoError(t, acted(b.proc.RetryQuarantined(ctx, "ledger", poison, nil)))
	b.requireFold(t, events)
}
