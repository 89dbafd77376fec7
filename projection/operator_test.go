package projection_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// This file tests poison handling and the operator functions. Its helpers
// (prefixed op) are shared with inspect_test.go and rebuild_test.go.

// errOpPoison is the error of a poisoned event's handler.
var errOpPoison = errors.New("poisoned event")

// opFault makes a wrapped projection's handler fail, while it is on, on
// chosen versions of one aggregate.
type opFault struct {
	agg      string
	versions map[int64]bool
	on       atomic.Bool
}

// newOpFault returns a fault, switched on, for versions of agg.
func newOpFault(agg string, versions ...int64) *opFault {
	f := &opFault{agg: agg, versions: map[int64]bool{}}
	for _, v := range versions {
		f.versions[v] = true
	}
	f.on.Store(true)
	return f
}

func (f *opFault) check(events []aggregate.Event) error {
	if !f.on.Load() {
		return nil
	}
	for _, e := range events {
		if e.Aggregate == f.agg && f.versions[e.Version] {
			return fmt.Errorf("%w: %s v%d", errOpPoison, e.Aggregate, e.Version)
		}
	}
	return nil
}

// opFaultyBatch wraps a BatchHandler (that also implements Setuper and
// Resetter) with a fault.
type opFaultyBatch struct {
	projection.BatchHandler
	fault *opFault
}

func (p opFaultyBatch) ApplyBatch(ctx context.Context, tx *projection.Tx, events []aggregate.Event) error {
	if err := p.fault.check(events); err != nil {
		return err
	}
	return p.BatchHandler.ApplyBatch(ctx, tx, events)
}

func (p opFaultyBatch) Setup(ctx context.Context, tx pgx.Tx) error {
	return p.BatchHandler.(projection.Setuper).Setup(ctx, tx)
}

func (p opFaultyBatch) Reset(ctx context.Context, tx pgx.Tx) error {
	return p.BatchHandler.(projection.Resetter).Reset(ctx, tx)
}

// opFaultyEvent wraps an EventHandler (that also implements Setuper and
// Resetter) with a fault.
type opFaultyEvent struct {
	projection.EventHandler
	fault *opFault
}

func (p opFaultyEvent) Apply(ctx context.Context, tx *projection.Tx, e aggregate.Event) error {
	if err := p.fault.check([]aggregate.Event{e}); err != nil {
		return err
	}
	return p.EventHandler.Apply(ctx, tx, e)
}

func (p opFaultyEvent) Setup(ctx context.Context, tx pgx.Tx) error {
	return p.EventHandler.(projection.Setuper).Setup(ctx, tx)
}

func (p opFaultyEvent) Reset(ctx context.Context, tx pgx.Tx) error {
	return p.EventHandler.(projection.Resetter).Reset(ctx, tx)
}

// opLedgerBundle is a processor with the ledger projection (named "ledger")
// behind a fault.
type opLedgerBundle struct {
	db    *pgtest.DB
	proc  *projection.Processor
	fault *opFault
	load  func(ctx context.Context, q interface {
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	}) (*ledger.Model, error)
}

// opLedger sets up the ledger behind fault, as a batch handler (kind
// "batch") or an event handler (kind "event").
func opLedger(t *testing.T, cfg *projection.Config, kind string, fault *opFault) *opLedgerBundle {
	t.Helper()
	b := &opLedgerBundle{db: pgtest.NewMigrated(t), fault: fault}
	var p projection.Projection
	switch kind {
	case "batch":
		l := ledger.New(nil)
		p, b.load = opFaultyBatch{l, fault}, l.Load
	case "event":
		l := ledger.NewSimple(nil)
		p, b.load = opFaultyEvent{l, fault}, l.Load
	default:
		t.Fatalf("unknown handler kind %q", kind)
	}
	b.proc = opProcessor(t, b.db, cfg, p)
	return b
}

// opProcessor returns a set-up processor for projections on db's schema.
func opProcessor(t *testing.T, db *pgtest.DB, cfg *projection.Config, projections ...projection.Projection) *projection.Processor {
	t.Helper()
	c := projection.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Schema = db.Schema
	proc, err := projection.New(db.Pool, &c, projections...)
	require.NoError(t, err)
	require.NoError(t, proc.Setup(t.Context()))
	return proc
}

// requireFold requires the ledger's read model to be the fold of events.
func (b *opLedgerBundle) requireFold(t *testing.T, events []aggregate.Event) {
	t.Helper()
	want, err := ledger.Fold(events)
	require.NoError(t, err)
	got, err := b.load(t.Context(), b.db.Pool)
	require.NoError(t, err)
	require.Equal(t, want, got)
}

// opWithout returns events without agg's versions from on.
func opWithout(events []aggregate.Event, agg string, from int64) []aggregate.Event {
	return slices.DeleteFunc(slices.Clone(events), func(e aggregate.Event) bool {
		return e.Aggregate == agg && e.Version >= from
	})
}

// opOf returns agg's events, in version order.
func opOf(events []aggregate.Event, agg string) []aggregate.Event {
	out := slices.DeleteFunc(slices.Clone(events), func(e aggregate.Event) bool { return e.Aggregate != agg })
	slices.SortFunc(out, func(a, b aggregate.Event) int { return int(a.Version - b.Version) })
	return out
}

// opConfig is the configuration of poison tests: quick retries.
func opConfig() *projection.Config {
	return &projection.Config{MaxAttempts: 3, RetryBackoff: time.Millisecond}
}

// opStatus returns the status row of one projection.
func opStatus(t *testing.T, proc *projection.Processor, name string) projection.ProjectionStatus {
	t.Helper()
	st, err := proc.Status(t.Context(), nil)
	require.NoError(t, err)
	for _, s := range st.Projections {
		if s.Name == name {
			s.OldestParkedAge, s.OldestParkedAgeSeconds = 0, 0 // they move; tests compare OldestParked
			return s
		}
	}
	t.Fatalf("no status row for projection %s", name)
	return projection.ProjectionStatus{}
}

// opCount runs a count query.
func opCount(t *testing.T, db *pgtest.DB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.Pool.QueryRow(t.Context(), sql, args...).Scan(&n))
	return n
}

// opJournal is a projection that records, per aggregate, every version it
// applies, in the order it applies them. Unlike the ledger, it tolerates
// skipped versions, so its expected read model is simply the set of applied
// versions — for the tests of skips and declared gaps.
type opJournal struct{ name string }

func (j opJournal) Name() string { return j.name }

func (j opJournal) Setup(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS op_journal (
  projection text NOT NULL, aggregate text NOT NULL, version bigint NOT NULL,
  seq bigserial NOT NULL, PRIMARY KEY (projection, aggregate, version))`)
	return err
}

func (j opJournal) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `DELETE FROM op_journal WHERE projection = $1`, j.name)
	return err
}

func (j opJournal) ApplyBatch(ctx context.Context, tx *projection.Tx, events []aggregate.Event) error {
	aggs, vers := make([]string, len(events)), make([]int64, len(events))
	for i, e := range events {
		aggs[i], vers[i] = e.Aggregate, e.Version
	}
	tx.Queue(`INSERT INTO op_journal (projection, aggregate, version)
SELECT $1, u.a, u.v FROM unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS u(a, v, o) ORDER BY u.o`, j.name, aggs, vers)
	return nil
}

// opJournalModel reads a journal: per aggregate, its versions in the order
// they were applied.
func opJournalModel(t *testing.T, db *pgtest.DB, name string) map[string][]int64 {
	t.Helper()
	rows, err := db.Pool.Query(t.Context(), `SELECT aggregate, version FROM op_journal WHERE projection = $1 ORDER BY seq`, name)
	require.NoError(t, err)
	m := map[string][]int64{}
	var agg string
	var v int64
	_, err = pgx.ForEachRow(rows, []any{&agg, &v}, func() error {
		m[agg] = append(m[agg], v)
		return nil
	})
	require.NoError(t, err)
	return m
}

// opJournalFold is the journal events must produce: per aggregate, its
// versions in order.
func opJournalFold(events []aggregate.Event) map[string][]int64 {
	m := map[string][]int64{}
	for _, e := range events {
		if !slices.Contains(m[e.Aggregate], e.Version) {
			m[e.Aggregate] = append(m[e.Aggregate], e.Version)
		}
	}
	for _, vs := range m {
		slices.Sort(vs)
	}
	return m
}

// opNotes returns note events of agg for versions from…to, for the journal.
func opNotes(agg string, from, to int64) []aggregate.Event {
	var out []aggregate.Event
	for v := from; v <= to; v++ {
		out = append(out, aggregate.Event{Aggregate: agg, Version: v, Type: "note", Data: []byte(fmt.Sprintf(`{"n": %d}`, v))})
	}
	return out
}

// opJournalBundle is a processor with a journal named "journal" behind a
// fault.
func opJournalBundle(t *testing.T, fault *opFault) (*pgtest.DB, *projection.Processor) {
	t.Helper()
	db := pgtest.NewMigrated(t)
	return db, opProcessor(t, db, opConfig(), opFaultyBatch{opJournal{"journal"}, fault})
}

// opLog is one operator_log row.
type opLog struct {
	Action, Projection, Aggregate string
	From, To                      *int64
	Reason                        string
}

func opLogRows(t *testing.T, db *pgtest.DB, action string) []opLog {
	t.Helper()
	rows, err := db.Pool.Query(t.Context(), `SELECT action, projection, aggregate, from_version, to_version, reason
FROM operator_log WHERE action = $1 ORDER BY id`, action)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[opLog])
	require.NoError(t, err)
	return out
}

func opPtr(v int64) *int64 { return &v }

func opShuffle(seed uint64, events []aggregate.Event) []aggregate.Event {
	out := slices.Clone(events)
	rand.New(rand.NewPCG(seed, seed+1)).Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

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
			require.NoError(t, b.proc.RetryQuarantined(ctx, "ledger", poison))
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
			for _, r := range res {
				require.Equal(t, projection.Duplicate, r.Outcome)
			}
			require.ErrorIs(t, b.proc.RetryQuarantined(ctx, "ledger", poison), projection.ErrNotQuarantined)
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

			err = b.proc.RetryQuarantined(ctx, "ledger", poison)
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
			require.NoError(t, b.proc.RetryQuarantined(ctx, "ledger", poison))
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

		require.ErrorIs(t, proc.SkipQuarantined(ctx, "nope", "a", "x"), projection.ErrUnknownProjection)
		require.ErrorIs(t, proc.SkipQuarantined(ctx, "journal", "b", "x"), projection.ErrNotQuarantined)
		require.ErrorIs(t, proc.SkipQuarantined(ctx, "journal", "zzz", "x"), projection.ErrNotFound)

		require.NoError(t, proc.SkipQuarantined(ctx, "journal", "a", "corrupt payload, INC-1"))
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
		require.ErrorIs(t, proc.SkipQuarantined(ctx, "journal", "a", "again"), projection.ErrNotQuarantined)

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

		require.NoError(t, proc.SkipQuarantined(ctx, "journal", "a", "bad"))
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
		require.NoError(t, proc.RetryQuarantined(ctx, "journal", "a"))
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
		opOutcomes(res))

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
		require.ErrorIs(t, proc.DeclareGap(ctx, c.proj, c.agg, c.to, "test"), c.wantErr, c.name)
	}
	require.Equal(t, map[string][]int64{"a": {1, 2}}, opJournalModel(t, db, "journal"), "failed declarations change nothing")

	require.NoError(t, proc.DeclareGap(ctx, "journal", "a", 3, "deleted at the source"))
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
	require.Equal(t, []projection.Outcome{projection.Conflict, projection.Applied}, opOutcomes(res))
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
	require.ErrorIs(t, proc.DeclareGap(ctx, "journal", "a", 9, "x"), projection.ErrBadGap)
	require.NoError(t, proc.DeclareGap(ctx, "journal", "a", 8, "7 and 8 never existed"))
	require.Equal(t, map[string][]int64{"a": {1, 2, 4, 5, 6, 9}}, opJournalModel(t, db, "journal"))
}

func opOutcomes(rs []projection.Result) []projection.Outcome {
	out := make([]projection.Outcome, len(rs))
	for i, r := range rs {
		out[i] = r.Outcome
	}
	return out
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
		res, err := relaxed.ReplayRejected(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, projection.Applied, res.Outcome)
	}
	want, err := ledger.Fold(events)
	require.NoError(t, err)
	got, err := l.Load(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, want, got)
	rejected, err = relaxed.Rejected(ctx, projection.ListOptions{})
	require.NoError(t, err)
	for _, r := range rejected {
		require.False(t, r.ReplayedAt.IsZero())
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
	r, err := relaxed.ReplayRejected(ctx, rejected[0].ID)
	var ve *aggregate.ValidationError
	require.ErrorAs(t, err, &ve)
	require.ErrorIs(t, err, aggregate.ErrInvalidJSON)
	require.Equal(t, projection.Rejected, r.Outcome)
	rejected, err = relaxed.Rejected(ctx, projection.ListOptions{Aggregate: "pay-x"})
	require.NoError(t, err)
	require.True(t, rejected[0].ReplayedAt.IsZero())
	require.EqualValues(t, 2, rejected[0].Count)
	require.Len(t, opLogRows(t, db, "replay-rejected"), 3)

	_, err = relaxed.ReplayRejected(ctx, 1<<40)
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
			errs[i] = b.proc.RetryQuarantined(ctx, "ledger", poison)
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
	require.NoError(t, b.proc.RetryQuarantined(ctx, "ledger", poison))
	b.requireFold(t, events)
}
