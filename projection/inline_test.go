package projection_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
)

// noGapLedger is the inline ledger without its Describe (and so without its
// Description.Gap): an operator's
// declared gap then moves the version row only, and the payment row stays
// behind it until the gate catches it up.
type noGapLedger struct{ l *ledger.Projection }

func (n noGapLedger) Name() string { return n.l.Name() }
func (n noGapLedger) ApplyBatch(ctx context.Context, tx *projection.Tx, events []aggregate.Event) error {
	return n.l.ApplyBatch(ctx, tx, events)
}
func (n noGapLedger) Setup(ctx context.Context, tx pgx.Tx) error  { return n.l.Setup(ctx, tx) }
func (n noGapLedger) InlineTable() (projection.InlineTable, bool) { return n.l.InlineTable() }
func (n noGapLedger) Reset(ctx context.Context, tx pgx.Tx) error  { return n.l.Reset(ctx, tx) }

// countingInline is an inline projection whose handler writes its row with
// Tx.Queue instead of Tx.QueueInline: the gate cannot see the rows it
// wrote, and must not take that for applied.
type countingInline struct{}

func (countingInline) Name() string { return "counting" }
func (countingInline) Setup(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS counting (id text PRIMARY KEY, version bigint NOT NULL, log bytea NOT NULL DEFAULT '')`)
	return err
}
func (countingInline) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE counting`)
	return err
}
func (countingInline) InlineTable() (projection.InlineTable, bool) {
	return projection.InlineTable{Table: pgx.Identifier{"counting"}, Key: "id", Version: "version", Log: "log"}, true
}
func (countingInline) Apply(ctx context.Context, tx *projection.Tx, e aggregate.Event) error {
	tx.Queue(`INSERT INTO counting (id, version) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version`, e.Aggregate, e.Version)
	return nil
}

// TestInline covers what the inline fast path must not get wrong: an
// aggregate whose version row moved past its row (a declared gap), stale
// redeliveries within and beyond the row's log, a batch mixing aggregates
// that continue and aggregates that park, and a handler that does not let
// the gate count its rows.
func TestInline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("DeclaredGapBeyondTheRow", func(t *testing.T) {
		t.Parallel()
		db := setup(t, nil).db
		l := ledger.New(nil)
		proc := opProcessor(t, db, opConfig(), noGapLedger{l})
		events := ledger.Generate(rand.New(rand.NewPCG(41, 1)), 1, 5)
		agg := events[0].Aggregate
		res, err := proc.Process(ctx, projection.Batch{Events: events[:1]})
		require.NoError(t, err)
		require.Equal(t, []projection.Outcome{A}, outcomes(res))
		// Versions 2 and 3 will never come; the payment row stays at 1.
		require.NoError(t, acted(proc.DeclareGap(ctx, "ledger", agg, 3, &projection.ActionOptions{Reason: "lost"})))
		// Version 2 turns up after all: it continues the row (at 1), but
		// the version row says 3. The fast path must not apply it.
		res, err = proc.Process(ctx, projection.Batch{Events: events[1:2]})
		require.NoError(t, err)
		require.Equal(t, []projection.Outcome{C}, outcomes(res))
		var state string
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT existing_state FROM conflicts WHERE version = 2`).Scan(&state))
		require.Equal(t, "skipped", state)
		// Version 4 applies: the gate catches the row up with the gap first.
		res, err = proc.Process(ctx, projection.Batch{Events: events[3:]})
		require.NoError(t, err)
		require.Equal(t, []projection.Outcome{A, A}, outcomes(res))
		v, err := proc.Version(ctx, "ledger", agg)
		require.NoError(t, err)
		require.EqualValues(t, 5, v)
		got, err := l.Load(ctx, db.Pool)
		require.NoError(t, err)
		require.EqualValues(t, 5, got.Payments[agg].Version)
	})

	t.Run("StaleWithinAndBeyondTheLog", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		events := ledger.Generate(rand.New(rand.NewPCG(41, 2)), 1, 20)
		for chunk := range slices.Chunk(events, 7) {
			_, err := b.proc.Process(ctx, projection.Batch{Events: chunk})
			require.NoError(t, err)
		}
		changed := func(e aggregate.Event) aggregate.Event {
			e.Data = []byte(`{"amount": 1}`)
			return e
		}
		// Version 10 is within the row's last 16 versions; version 1 is not.
		res, err := b.proc.Process(ctx, projection.Batch{Events: []aggregate.Event{events[9], changed(events[9]), events[0], changed(events[0])}})
		require.NoError(t, err)
		require.Equal(t, []projection.Outcome{D, C, D, D}, outcomes(res))
		b.requireFold(t, events)
	})

	t.Run("MixedBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		events := ledger.Generate(rand.New(rand.NewPCG(41, 3)), 2, 5)
		byAgg := map[string][]aggregate.Event{}
		for _, e := range events {
			byAgg[e.Aggregate] = append(byAgg[e.Aggregate], e)
		}
		x, y := byAgg["pay-000000"], byAgg["pay-000001"]
		_, err := b.proc.Process(ctx, projection.Batch{Events: []aggregate.Event{x[0], y[0]}})
		require.NoError(t, err)
		s0, m0 := projection.Speculation(b.proc)
		// x continues (2, 3); y has a gap (3, 5): no speculation for the
		// batch, but x takes the fast path and y parks.
		res, err := b.proc.Process(ctx, projection.Batch{Events: []aggregate.Event{x[1], x[2], y[2], y[4]}})
		require.NoError(t, err)
		require.Equal(t, []projection.Outcome{A, A, P, P}, outcomes(res))
		s1, m1 := projection.Speculation(b.proc)
		require.EqualValues(t, 1, s1-s0, "the batch took x by the fast path")
		require.Zero(t, m1-m0)
		var xv int64
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT version FROM versions WHERE aggregate = 'pay-000000'`).Scan(&xv))
		require.Zero(t, xv, "the fast path wrote no version row for x")
		// The rest, shuffled: everything drains.
		rest := []aggregate.Event{y[3], x[4], y[1], x[3]}
		_, err = b.proc.Process(ctx, projection.Batch{Events: rest})
		require.NoError(t, err)
		b.requireFold(t, events)
	})

	t.Run("MarkedRows", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		events := ledger.Generate(rand.New(rand.NewPCG(41, 4)), 1, 4)
		agg := events[0].Aggregate
		row := func() (version int64, marked bool) {
			t.Helper()
			var n int
			require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT version, octet_length(inorder_log) FROM ledger_payments WHERE payment_id = $1`, agg).Scan(&version, &n))
			require.Equal(t, version, int64(n/8), "one entry per version (fewer than 16)")
			require.Contains(t, []int{0, 1}, n%8, "a mark is one byte")
			return version, n%8 == 1
		}
		process := func(es ...aggregate.Event) []projection.Outcome {
			t.Helper()
			res, err := b.proc.Process(ctx, projection.Batch{Events: es})
			require.NoError(t, err)
			return outcomes(res)
		}
		require.Equal(t, []projection.Outcome{A}, process(events[0]))
		v, marked := row()
		require.Equal(t, int64(1), v)
		require.False(t, marked)
		// Version 3 parks: the row is marked, so that the fast path leaves
		// the aggregate alone until it drains.
		require.Equal(t, []projection.Outcome{P}, process(events[2]))
		v, marked = row()
		require.Equal(t, int64(1), v)
		require.True(t, marked, "a row whose aggregate has parked versions is marked")
		// The applied log reads the entries, not the mark.
		log, err := b.proc.AppliedLog(ctx, projection.ListOptions{Projection: "ledger", Aggregate: agg})
		require.NoError(t, err)
		require.Len(t, log, 1)
		require.Equal(t, int64(1), log[0].Version)
		require.Equal(t, projection.InlineEntry(events[0]), log[0].Entry)
		// Version 2 continues the row, and a processor that has not met the
		// aggregate speculates on it: the mark sends it down the general
		// path, which drains version 3.
		fresh, err := projection.New(b.db.Pool, &projection.Config{Schema: b.db.Schema}, ledger.New(nil))
		require.NoError(t, err)
		res, err := fresh.Process(ctx, projection.Batch{Events: events[1:2]})
		require.NoError(t, err)
		require.Equal(t, []projection.Outcome{A}, outcomes(res))
		s1, m1 := projection.Speculation(fresh)
		require.Zero(t, s1, "no fast path")
		require.EqualValues(t, 1, m1, "speculation missed on the mark")
		v, marked = row()
		require.Equal(t, int64(3), v, "version 3 drained")
		require.False(t, marked, "nothing parked: the mark is cleared")
		// The next version takes the fast path again.
		res, err = fresh.Process(ctx, projection.Batch{Events: events[3:4]})
		require.NoError(t, err)
		require.Equal(t, []projection.Outcome{A}, outcomes(res))
		s2, m2 := projection.Speculation(fresh)
		require.EqualValues(t, 1, s2-s1)
		require.Zero(t, m2-m1)
		b.requireFold(t, events)
		ver, err := b.proc.Version(ctx, "ledger", agg)
		require.NoError(t, err)
		require.Equal(t, int64(4), ver)
	})

	t.Run("RowsNotCounted", func(t *testing.T) {
		t.Parallel()
		db := setup(t, nil).db
		proc := opProcessor(t, db, opConfig(), countingInline{})
		e := ledger.Generate(rand.New(rand.NewPCG(41, 4)), 1, 1)[0]
		res, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{e}})
		require.NoError(t, err)
		require.Equal(t, []projection.Outcome{Q}, outcomes(res))
		q, err := proc.Quarantined(ctx, projection.ListOptions{Projection: "counting"})
		require.NoError(t, err)
		require.Len(t, q, 1)
		require.Contains(t, q[0].Error, "QueueInline")
	})
}

// TestInlineRunWithoutRow: a batch whose runs all continue where they
// seem to — versions 2 and 3 of an aggregate the gate has not seen — must
// not let an inline projection's upsert create the row from version 2:
// Condition guards the upsert's update, not its insert. orderLog checks
// nothing itself.
func TestInlineRunWithoutRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := setup(t, nil).db
	proc := opProcessor(t, db, opConfig(), orderLog{})
	ev := func(v int64) aggregate.Event {
		return aggregate.Event{Aggregate: "x", Version: v, Type: "t", Data: []byte(`{}`)}
	}
	res, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{ev(2), ev(3)}})
	require.NoError(t, err)
	require.Equal(t, []projection.Outcome{projection.Parked, projection.Parked}, outcomes(res))
	res, err = proc.Process(ctx, projection.Batch{Events: []aggregate.Event{ev(1)}})
	require.NoError(t, err)
	require.Equal(t, []projection.Outcome{projection.Applied}, outcomes(res))
	var applied string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT applied FROM order_log WHERE id = 'x'`).Scan(&applied))
	require.Equal(t, "1,2,3,", applied)
}

// TestInlineRowsWritten: speculation takes the rows that the processor's
// own commits wrote as existing, and counts the others — after a restart,
// and after a rebuild in place emptied the read model, which must not let
// an aggregate's later versions create its row.
func TestInlineRowsWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := setup(t, nil).db
	proc := opProcessor(t, db, opConfig(), orderLog{})
	ev := func(agg string, v int64) aggregate.Event {
		return aggregate.Event{Aggregate: agg, Version: v, Type: "t", Data: []byte(`{}`)}
	}
	process := func(proc *projection.Processor, events ...aggregate.Event) []projection.Outcome {
		t.Helper()
		res, err := proc.Process(ctx, projection.Batch{Events: events})
		require.NoError(t, err)
		return outcomes(res)
	}
	const A, P = projection.Applied, projection.Parked
	require.Equal(t, []projection.Outcome{A}, process(proc, ev("x", 1)))
	require.Equal(t, []projection.Outcome{A}, process(proc, ev("x", 2)))
	require.Zero(t, projection.RowsCounted(proc), "x's row was written by this processor")

	// Another processor (a restart) counts it once, then knows it.
	other := opProcessor(t, db, opConfig(), orderLog{})
	require.Equal(t, []projection.Outcome{A}, process(other, ev("x", 3)))
	require.EqualValues(t, 1, projection.RowsCounted(other))
	require.Equal(t, []projection.Outcome{A}, process(other, ev("x", 4)))
	require.EqualValues(t, 1, projection.RowsCounted(other))

	// A rebuild that replays nothing empties the read model: x starts over,
	// and its versions 5 and 6 wait for the rest.
	require.NoError(t, rbInPlace(ctx, proc, "order-log", func(context.Context, func(context.Context, []aggregate.Event) error) error {
		return nil
	}))
	require.Equal(t, []projection.Outcome{P, P}, process(other, ev("x", 5), ev("x", 6)))
	require.Equal(t, []projection.Outcome{A, A, A, A}, process(other, ev("x", 1), ev("x", 2), ev("x", 3), ev("x", 4)))
	var applied string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT applied FROM order_log WHERE id = 'x'`).Scan(&applied))
	require.Equal(t, "1,2,3,4,5,6,", applied)
}
