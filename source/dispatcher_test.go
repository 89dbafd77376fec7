package source_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/runtest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

const waitTimeout = 30 * time.Second

type bundle struct{ *ledgertest.Bundle }

func setup(t *testing.T) *bundle { return &bundle{ledgertest.New(t)} }

// acker records settlements. Redeliver says what Nack answers.
type acker struct {
	mu        sync.Mutex
	acked     map[*source.Delivery]int
	nacked    map[*source.Delivery]int
	redeliver bool
	onAck     func(ds []*source.Delivery)
	signal    chan struct{}
}

func newAcker(redeliver bool) *acker {
	return &acker{acked: map[*source.Delivery]int{}, nacked: map[*source.Delivery]int{}, redeliver: redeliver, signal: make(chan struct{}, 1)}
}

func (a *acker) Ack(ds []*source.Delivery) {
	if a.onAck != nil {
		a.onAck(ds)
	}
	a.mu.Lock()
	for _, d := range ds {
		a.acked[d]++
	}
	a.mu.Unlock()
	a.notify()
}

func (a *acker) Nack(ds []*source.Delivery, _ error) bool {
	a.mu.Lock()
	for _, d := range ds {
		a.nacked[d]++
	}
	a.mu.Unlock()
	a.notify()
	return a.redeliver
}

func (a *acker) notify() {
	select {
	case a.signal <- struct{}{}:
	default:
	}
}

func (a *acker) counts() (acked, nacked int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.acked), len(a.nacked)
}

// waitFor waits on signal until cond holds.
func waitFor(t *testing.T, signal <-chan struct{}, cond func() bool, what string) {
	t.Helper()
	runtest.WaitFor(t, signal, waitTimeout, cond, what)
}

// failFirst is a BeforeCommit that fails the first n transactions.
func failFirst(n int64) func(context.Context, pgx.Tx, []*source.Delivery) error {
	var failures atomic.Int64
	failures.Store(n)
	return func(context.Context, pgx.Tx, []*source.Delivery) error {
		if failures.Add(-1) >= 0 {
			return errors.New("injected failure")
		}
		return nil
	}
}

// run starts d and stops it when the test ends.
func run(t *testing.T, d *source.Dispatcher) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.ErrorIs(t, <-done, context.Canceled)
		})
	}
	t.Cleanup(stop)
	return stop
}

func deliveries(events []aggregate.Event, a source.Acker) []*source.Delivery {
	ds := make([]*source.Delivery, len(events))
	for i, e := range events {
		ds[i] = &source.Delivery{Event: e, Acker: a}
	}
	return ds
}

func TestDispatcher(t *testing.T) {
	t.Parallel()

	t.Run("PartitionsBatchesAndAcksAfterCommit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events := ledger.Generate(rand.New(rand.NewPCG(1, 1)), 200, 10)
		a := newAcker(false)
		// An ack comes after the commit: the delivery's version is
		// visible to another connection by then.
		var notCommitted atomic.Int64
		a.onAck = func(ds []*source.Delivery) {
			var n int
			err := b.DB.Pool.QueryRow(context.Background(), `SELECT count(*) FROM unnest($1::text[], $2::bigint[]) AS k(aggregate, version)
JOIN ledger_payments p ON p.payment_id = k.aggregate AND p.version >= k.version`,
				aggs(ds), versions(ds)).Scan(&n)
			if err != nil || n != len(ds) {
				notCommitted.Add(1)
			}
		}
		var batches, largest, marks atomic.Int64
		_, err := b.DB.Pool.Exec(t.Context(), `CREATE TABLE commit_marks (n int)`)
		require.NoError(t, err)
		d, err := source.NewDispatcher(&source.Config{
			Processor: b.Proc, Workers: 4, BatchSize: 100, MaxWait: 20 * time.Millisecond,
			BeforeCommit: func(ctx context.Context, tx pgx.Tx, batch []*source.Delivery) error {
				_, err := tx.Exec(ctx, `INSERT INTO commit_marks VALUES (1)`)
				return err
			},
			AfterCommit: func(batch []*source.Delivery, results []projection.Result) {
				batches.Add(1)
				if int64(len(batch)) > largest.Load() {
					largest.Store(int64(len(batch)))
				}
				if len(results) == len(batch) {
					marks.Add(1)
				}
			},
		})
		require.NoError(t, err)
		run(t, d)
		for _, del := range deliveries(events, a) {
			require.NoError(t, d.Dispatch(t.Context(), del))
		}
		waitFor(t, a.signal, func() bool { n, _ := a.counts(); return n == len(events) }, "every delivery acked")
		b.RequireFold(t, events)
		for del, n := range a.acked {
			require.Equal(t, 1, n, "acked once: %+v", del.Event)
		}
		require.Zero(t, notCommitted.Load(), "an ack came before its commit")
		require.LessOrEqual(t, largest.Load(), int64(100))
		require.Equal(t, batches.Load(), marks.Load())
		var committed int64
		require.NoError(t, b.DB.Pool.QueryRow(t.Context(), `SELECT count(*) FROM commit_marks`).Scan(&committed))
		require.Equal(t, batches.Load(), committed, "BeforeCommit ran once in each committed transaction")
		require.Equal(t, batches.Load(), d.Stats().Committed)
		require.Less(t, batches.Load(), int64(len(events)/10), "batches, not transactions per event")
		// One aggregate's deliveries stay on one worker, in order: nothing
		// had to wait for a predecessor.
		c := b.Proc.Counts()["ledger"]
		require.Zero(t, c.Deliveries[projection.Parked])
		require.EqualValues(t, len(events), c.Applied())
	})

	t.Run("Checkpoints", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events := ledger.Generate(rand.New(rand.NewPCG(7, 7)), 30, 3)
		a := newAcker(false)
		d, err := source.NewDispatcher(&source.Config{
			Processor: b.Proc, Workers: 1, BatchSize: 1000, MaxWait: time.Hour, // one batch, at Flush
			MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
			Checkpoints: func(batch []*source.Delivery) []projection.Checkpoint {
				last := batch[len(batch)-1].Handle.(int)
				return []projection.Checkpoint{{Name: "src", Position: projection.Position(fmt.Sprintf("%04d", last))}}
			},
			BeforeCommit: failFirst(1),
		})
		require.NoError(t, err)
		run(t, d)
		ds := deliveries(events, a)
		for i, del := range ds {
			del.Handle = i
			require.NoError(t, d.Dispatch(t.Context(), del))
		}
		require.NoError(t, d.Flush(t.Context()))
		b.RequireFold(t, events)
		got, ok, err := b.Proc.LoadCheckpoint(t.Context(), "src")
		require.NoError(t, err)
		require.True(t, ok, "the batch's checkpoint committed with it")
		require.Equal(t, fmt.Sprintf("%04d", len(ds)-1), string(got))
		require.Equal(t, int64(1), d.Stats().Failures, "the first transaction failed, with its checkpoint")
	})

	t.Run("Exclusive", func(t *testing.T) {
		// Config.Exclusive reaches the processor on every batch, and only
		// where it is set.
		t.Parallel()
		b := setup(t)
		events := ledger.Generate(rand.New(rand.NewPCG(1, 3)), 50, 4)
		for _, exclusive := range []bool{false, true} {
			proc, marks := b.MarkedProcessor(t)
			d, err := source.NewDispatcher(&source.Config{Processor: proc, Workers: 2, BatchSize: 20, MaxWait: time.Millisecond, Exclusive: exclusive})
			require.NoError(t, err)
			stop := run(t, d)
			a := newAcker(false)
			for _, del := range deliveries(events, a) {
				require.NoError(t, d.Dispatch(t.Context(), del))
			}
			waitFor(t, a.signal, func() bool { n, _ := a.counts(); return n == len(events) }, "every delivery acked")
			stop()
			marks.RequireMarked(t, exclusive)
		}
		b.RequireFold(t, events)
	})

	t.Run("FlushSkipsMaxWait", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events := ledger.Generate(rand.New(rand.NewPCG(2, 2)), 5, 3)
		a := newAcker(false)
		d, err := source.NewDispatcher(&source.Config{Processor: b.Proc, MaxWait: time.Hour})
		require.NoError(t, err)
		run(t, d)
		for _, del := range deliveries(events, a) {
			require.NoError(t, d.Dispatch(t.Context(), del))
		}
		require.NoError(t, d.Flush(t.Context()))
		n, _ := a.counts()
		require.Equal(t, len(events), n)
		b.RequireFold(t, events)
	})

	t.Run("FailedBatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events := ledger.Generate(rand.New(rand.NewPCG(3, 3)), 20, 3)
		d, err := source.NewDispatcher(&source.Config{
			Processor: b.Proc, Workers: 1, BatchSize: 1000, MaxWait: time.Hour, // one batch, at Flush
			MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond,
			BeforeCommit: failFirst(3),
		})
		require.NoError(t, err)
		run(t, d)
		// Half the deliveries come from a source that redelivers (their
		// Nack takes them back), half from one that cannot: the worker
		// retries those until they commit.
		redeliver, retry := newAcker(true), newAcker(false)
		half := len(events) / 2
		all := append(deliveries(events[:half], redeliver), deliveries(events[half:], retry)...)
		for _, del := range all {
			require.NoError(t, d.Dispatch(t.Context(), del))
		}
		require.NoError(t, d.Flush(t.Context()))
		acked, nacked := retry.counts()
		require.Equal(t, len(events)-half, acked)
		require.Equal(t, len(events)-half, nacked, "each retried delivery was offered to Nack first")
		acked, nacked = redeliver.counts()
		require.Zero(t, acked)
		require.Equal(t, half, nacked)
		st := d.Stats()
		require.EqualValues(t, 3, st.Failures)
		require.EqualValues(t, half, st.Nacked)
		require.EqualValues(t, 3*(len(events)-half), st.Retried)
		// Redeliver what the first source took back.
		for _, del := range deliveries(events[:half], redeliver) {
			require.NoError(t, d.Dispatch(t.Context(), del))
		}
		require.NoError(t, d.Flush(t.Context()))
		b.RequireFold(t, events)
	})

	t.Run("StopAbandonsUnsettled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events := ledger.Generate(rand.New(rand.NewPCG(4, 4)), 3, 2)
		entered := make(chan struct{})
		var once sync.Once
		d, err := source.NewDispatcher(&source.Config{
			Processor: b.Proc, MaxWait: time.Millisecond,
			BeforeCommit: func(ctx context.Context, tx pgx.Tx, batch []*source.Delivery) error {
				once.Do(func() { close(entered) })
				<-ctx.Done() // hold the transaction until the dispatcher stops
				return ctx.Err()
			},
		})
		require.NoError(t, err)
		stop := run(t, d)
		a := newAcker(true)
		for _, del := range deliveries(events, a) {
			require.NoError(t, d.Dispatch(t.Context(), del))
		}
		<-entered
		stop()
		acked, nacked := a.counts()
		require.Zero(t, acked)
		require.Zero(t, nacked)
		require.ErrorIs(t, d.Flush(t.Context()), source.ErrStopped)
		require.ErrorIs(t, d.Dispatch(t.Context(), deliveries(events, a)[0]), source.ErrStopped)
		var n int
		require.NoError(t, b.DB.Pool.QueryRow(t.Context(), `SELECT count(*) FROM ledger_payments`).Scan(&n))
		require.Zero(t, n, "the abandoned batch rolled back")
	})

	t.Run("RejectsAreRecorded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		good := ledger.Generate(rand.New(rand.NewPCG(5, 5)), 1, 1)[0]
		bad := aggregate.Event{Aggregate: "pay-x", Version: 1, Type: ledger.Authorized, Data: []byte{0xff}}
		a := newAcker(false)
		d, err := source.NewDispatcher(&source.Config{Processor: b.Proc, Source: "unit"})
		require.NoError(t, err)
		run(t, d)
		require.NoError(t, d.Dispatch(t.Context(), &source.Delivery{Event: bad, Acker: a,
			Reject: &aggregate.ValidationError{Err: aggregate.ErrInvalidJSON, Detail: "content type application/octet-stream is not JSON"}}))
		require.NoError(t, d.Dispatch(t.Context(), &source.Delivery{Event: good, Acker: a}))
		require.NoError(t, d.Flush(t.Context()))
		acked, _ := a.counts()
		require.Equal(t, 2, acked)
		var src, reason, msg string
		require.NoError(t, b.DB.Pool.QueryRow(t.Context(), `SELECT source, reason, error FROM rejected`).Scan(&src, &reason, &msg))
		require.Equal(t, "unit", src)
		require.Equal(t, "invalid_json", reason)
		require.Contains(t, msg, "application/octet-stream")
		b.RequireFold(t, []aggregate.Event{good})
	})

	// A full window closes every partial batch at once: nothing more can
	// come until one commits, so no worker waits for MaxWait. Dispatch
	// blocks while the window is full.
	t.Run("FullWindowClosesBatches", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events := ledger.Generate(rand.New(rand.NewPCG(6, 6)), 40, 3)
		a := newAcker(false)
		// Without the rule, the first 10 deliveries would wait an hour for
		// their batches to fill and Dispatch would block behind them.
		d, err := source.NewDispatcher(&source.Config{
			Processor: b.Proc, Workers: 4, BatchSize: 1000, MaxWait: time.Hour, MaxInFlight: 10,
		})
		require.NoError(t, err)
		run(t, d)
		dispatched := make(chan error, 1)
		go func() {
			for _, del := range deliveries(events, a) {
				if err := d.Dispatch(t.Context(), del); err != nil {
					dispatched <- err
					return
				}
			}
			dispatched <- nil
		}()
		waitFor(t, a.signal, func() bool { n, _ := a.counts(); return n >= len(events)-10 },
			"all but the last window acked without Flush, though MaxWait is an hour")
		require.NoError(t, <-dispatched)
		require.NoError(t, d.Flush(t.Context())) // the last deliveries may not fill the window
		st := d.Stats()
		require.Equal(t, 10, st.MaxInFlight)
		require.Zero(t, st.InFlight)
		require.Positive(t, st.Closed[source.CloseWindow])
		require.Zero(t, st.Closed[source.CloseMaxWait]+st.Closed[source.CloseFull])
		var batches int64
		for _, n := range st.Fill {
			batches += n
		}
		require.Equal(t, st.Batches, batches, "every batch's fill counted")
		require.Greater(t, st.FillSum, 0.0)
		require.Positive(t, st.Filling+st.Idle, "workers waited for input at times")
		b.RequireFold(t, events)
	})

	t.Run("Validates", func(t *testing.T) {
		t.Parallel()
		_, err := source.NewDispatcher(nil)
		require.Error(t, err)
		_, err = source.NewDispatcher(&source.Config{})
		require.Error(t, err)
	})
}

func aggs(ds []*source.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Event.Aggregate
	}
	return out
}

func versions(ds []*source.Delivery) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.Event.Version
	}
	return out
}

// Config.Checkpoints gives each batch the low watermark of a Tracker, which
// the processor writes in the batch's own transaction: once every delivery
// is acknowledged, the stored checkpoint is the last position, and it was
// written by the batches (no other write of it happens here).
func TestDispatcherCheckpoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := newAcker(false)
	events := ledger.Generate(rand.New(rand.NewPCG(7, 7)), 30, 6)
	tr := source.NewTracker[int]()
	var written atomic.Int64
	d, err := source.NewDispatcher(&source.Config{
		Processor: b.Proc, Workers: 4, BatchSize: 25, MaxWait: 5 * time.Millisecond,
		Checkpoints: func(batch []*source.Delivery) []projection.Checkpoint {
			tickets := make([]source.Ticket, len(batch))
			for i, del := range batch {
				tickets[i] = del.Ticket
			}
			p, ok := tr.WatermarkWith(tickets)
			if !ok {
				return nil
			}
			written.Add(1)
			return []projection.Checkpoint{{Name: "test", Position: projection.Position(fmt.Sprintf("%08d", p))}}
		},
		AfterCommit: func(batch []*source.Delivery, _ []projection.Result) {
			tickets := make([]source.Ticket, len(batch))
			for i, del := range batch {
				tickets[i] = del.Ticket
			}
			tr.Done(tickets...)
		},
	})
	require.NoError(t, err)
	run(t, d)
	for i, del := range deliveries(events, a) {
		del.Ticket = tr.Track(i + 1)
		require.NoError(t, d.Dispatch(t.Context(), del))
	}
	waitFor(t, a.signal, func() bool { n, _ := a.counts(); return n == len(events) }, "every delivery acked")
	require.NoError(t, d.Flush(t.Context()))
	// A batch that committed last holds the whole stream's watermark only
	// if every other had committed; one more batch makes sure of it.
	extra := deliveries(events[:1], a)[0]
	extra.Ticket = tr.Track(len(events) + 1)
	require.NoError(t, d.Dispatch(t.Context(), extra))
	require.NoError(t, d.Flush(t.Context()))
	pos, ok, err := b.Proc.LoadCheckpoint(t.Context(), "test")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, fmt.Sprintf("%08d", len(events)+1), string(pos))
	require.Positive(t, written.Load())
}
