package projection_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/projection/projectiontest"
)

// TestExclusiveBatches delivers a jittered stream (each delivery displaced
// by up to two batches, 5% copies: most batches are mixed) of the hot-rows
// projection, inline, with 4 workers:
//
//   - partitioned by aggregate, without and with Batch.Exclusive (a true
//     claim): both leave the in-order fold and never deadlock, and the
//     claim locks fewer rows before the handlers run;
//   - with the claim false: the stream delivered twice at once, by 4
//     workers partitioned and 4 more taking batches from a shared queue,
//     every batch claiming Exclusive (two consumers holding one partition,
//     as in a rebalance). The claim is never trusted for correctness: the
//     read model is the in-order fold, every event applied once, whatever
//     deadlocks it cost.
func TestExclusiveBatches(t *testing.T) {
	t.Parallel()
	const aggregates, batch = 1000, 200
	events, jittered, want := hotJittered(t, 7, aggregates, batch)

	run := func(t *testing.T, deliver func(ctx context.Context, proc *projection.Processor) error) *projection.Processor {
		t.Helper()
		db := pgtest.NewMigrated(t)
		proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema}, &hotRows{name: "hot", inline: true})
		require.NoError(t, err)
		require.NoError(t, proc.Setup(t.Context()))
		require.NoError(t, deliver(t.Context(), proc))
		got, err := hotLoad(t.Context(), db.Pool)
		require.NoError(t, err)
		require.Equal(t, want, got, "the read model is not the in-order fold")
		projectiontest.RequireSettled(t, proc, events)
		require.Equal(t, int64(len(events)), proc.Counts()["hot"].Applied(), "every event applied once")
		return proc
	}
	partitioned := func(exclusive bool) func(ctx context.Context, proc *projection.Processor) error {
		return func(ctx context.Context, proc *projection.Processor) error {
			return benchFanOut(ctx, jittered, batch, 4, true, func(ctx context.Context, es []aggregate.Event) error {
				_, err := proc.Process(ctx, projection.Batch{Events: es, Exclusive: exclusive})
				return err
			})
		}
	}

	var locked [2]int64
	for i, exclusive := range []bool{false, true} {
		proc := run(t, partitioned(exclusive))
		n := proc.Counts()["hot"]
		require.Zero(t, n.Deadlocks, "exclusive %v: partitioned workers deadlocked", exclusive)
		speculated, misspeculated := projection.Speculation(proc)
		t.Logf("exclusive %v: %d rows locked before the handlers, %d speculative attempts, %d missed", exclusive, projection.RowsLocked(proc), speculated, misspeculated)
		locked[i] = projection.RowsLocked(proc)
	}
	require.Positive(t, locked[0], "no mixed attempt locked rows: the stream does not exercise the claim")
	require.Less(t, locked[1], locked[0]/2, "the claim did not spare the fast aggregates' locks")

	proc := run(t, func(ctx context.Context, proc *projection.Processor) error {
		g, ctx := errgroup.WithContext(ctx)
		for _, shared := range []bool{false, true} {
			g.Go(func() error {
				return benchFanOut(ctx, jittered, batch, 4, !shared, func(ctx context.Context, es []aggregate.Event) error {
					_, err := proc.Process(ctx, projection.Batch{Events: es, Exclusive: true})
					return err
				})
			})
		}
		return g.Wait()
	})
	t.Logf("false claims: %d deadlocks retried", proc.Counts()["hot"].Deadlocks)
}

// barrierRows is hotRows whose first two handler calls wait for each
// other (or for a few seconds): two transactions then hold what they
// locked before their handlers when their handlers' writes go out.
type barrierRows struct {
	*hotRows
	calls   atomic.Int32
	arrived sync.WaitGroup
}

func (h *barrierRows) ApplyBatch(ctx context.Context, tx *projection.Tx, events []aggregate.Event) error {
	if h.calls.Add(1) <= 2 {
		h.arrived.Done()
		both := make(chan struct{})
		go func() { h.arrived.Wait(); close(both) }()
		select {
		case <-both:
		case <-time.After(5 * time.Second):
		}
	}
	return h.hotRows.ApplyBatch(ctx, tx, events)
}

// TestExclusiveClaimDeadlock makes a false claim deadlock and checks what it
// costs: rows a and b at version 1; batch A = {a v2, b v3, b v5}, batch B
// = {a v3, a v5, b v2}, both marked exclusive and processed at once. A gap
// in a batch makes its attempt mixed: A takes a by the fast path and locks
// b's row (b's versions park), B the other way round, and their handlers'
// upserts then want the row the other holds. PostgreSQL breaks the
// deadlock; the processor counts it and retries the batch, and once the
// missing versions come the read model is the in-order fold.
func TestExclusiveClaimDeadlock(t *testing.T) {
	t.Parallel()
	db := pgtest.NewMigrated(t)
	h := &barrierRows{hotRows: &hotRows{name: "hot", inline: true}}
	h.arrived.Add(2)
	proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema}, h)
	require.NoError(t, err)
	require.NoError(t, proc.Setup(t.Context()))
	ev := func(agg string, v int64) aggregate.Event {
		e, err := aggregate.New(agg, v, hotType, hotEvent{K: v, A: 10 * v})
		require.NoError(t, err)
		return e
	}
	h.calls.Store(2) // the first batch passes the barrier
	_, err = proc.Process(t.Context(), projection.Batch{Events: []aggregate.Event{ev("a", 1), ev("b", 1)}})
	require.NoError(t, err)
	h.calls.Store(0)

	g, ctx := errgroup.WithContext(t.Context())
	for _, es := range [][]aggregate.Event{{ev("a", 2), ev("b", 3), ev("b", 5)}, {ev("a", 3), ev("a", 5), ev("b", 2)}} {
		g.Go(func() error {
			_, err := proc.Process(ctx, projection.Batch{Events: es, Exclusive: true})
			return err
		})
	}
	require.NoError(t, g.Wait())
	_, err = proc.Process(t.Context(), projection.Batch{Events: []aggregate.Event{ev("a", 4), ev("b", 4)}})
	require.NoError(t, err)
	var events []aggregate.Event
	for v := range int64(5) {
		events = append(events, ev("a", v+1), ev("b", v+1))
	}
	want, err := hotFold(events)
	require.NoError(t, err)
	got, err := hotLoad(t.Context(), db.Pool)
	require.NoError(t, err)
	require.Equal(t, want, got, "the read model is not the in-order fold")
	projectiontest.RequireSettled(t, proc, events)
	n := proc.Counts()["hot"]
	require.Equal(t, int64(len(events)), n.Applied())
	require.EqualValues(t, 1, n.Deadlocks, "the false claim's deadlock, retried once: %+v", n)
}
