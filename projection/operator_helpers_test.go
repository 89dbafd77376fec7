package projection_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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

// This file holds the helpers of operator_test.go (prefixed op), shared
// with inspect_test.go and rebuild_test.go.

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

// opFaultyBatch wraps a BatchHandler (that also implements Tables) with
// a fault.
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

// InlineTable forwards the wrapped projection's (projection.Inline).
func (p opFaultyBatch) InlineTable() (projection.InlineTable, bool) {
	if in, ok := p.BatchHandler.(projection.Inline); ok {
		return in.InlineTable()
	}
	return projection.InlineTable{}, false
}

func (p opFaultyBatch) Setup(ctx context.Context, tx pgx.Tx) error {
	return p.BatchHandler.(projection.Tables).Setup(ctx, tx)
}

func (p opFaultyBatch) Reset(ctx context.Context, tx pgx.Tx) error {
	return p.BatchHandler.(projection.Tables).Reset(ctx, tx)
}

// opFaultyEvent wraps an EventHandler (that also implements Tables) with
// a fault.
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

// InlineTable forwards the wrapped projection's (projection.Inline).
func (p opFaultyEvent) InlineTable() (projection.InlineTable, bool) {
	if in, ok := p.EventHandler.(projection.Inline); ok {
		return in.InlineTable()
	}
	return projection.InlineTable{}, false
}

func (p opFaultyEvent) Setup(ctx context.Context, tx pgx.Tx) error {
	return p.EventHandler.(projection.Tables).Setup(ctx, tx)
}

func (p opFaultyEvent) Reset(ctx context.Context, tx pgx.Tx) error {
	return p.EventHandler.(projection.Tables).Reset(ctx, tx)
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
	case "batch-rows":
		l := ledger.New(&ledger.Options{VersionRows: true})
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
func opCount(t testing.TB, db *pgtest.DB, sql string, args ...any) int64 {
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

// acted returns the error of an operator action, for the tests that check
// only that.
func acted(_ projection.ActionReport, err error) error { return err }
