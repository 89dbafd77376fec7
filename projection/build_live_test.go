package projection_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/projection"
)

// TestBuildUnderLiveTraffic rebuilds the ledger side by side while events
// keep being appended — during the replay, the catch-up, the verification
// and after the switch — and delivered shuffled and duplicated to three
// competing workers, each a processor of its own (as separate processes
// would be), while readers hammer the HTTP API. Every read must be
// exactly the in-order fold of its payment at the version it reports (a
// read mixing generations, or a partial one, is not), no read may fail,
// and no payment's version may go back; at the end both generations equal
// the in-order fold of everything appended. With owners, every worker asks
// to own the gate keys it feeds (Config.Owner): one owns the live key, then
// the new generation's too, and after the switch its key.
func TestBuildUnderLiveTraffic(t *testing.T) {
	t.Parallel()
	for _, owners := range []bool{false, true} {
		t.Run(map[bool]string{false: "competing", true: "owners"}[owners], func(t *testing.T) {
			t.Parallel()
			testBuildUnderLiveTraffic(t, owners)
		})
	}
}

func testBuildUnderLiveTraffic(t *testing.T, owners bool) {
	ctx := t.Context()
	b := genSetup(t)
	all := ledger.Generate(rand.New(rand.NewPCG(31, 32)), 250, 8)
	initial := len(all) * 2 / 5
	stream := newGenStream(all[:initial], 25)

	// The broker: every event appended to the stream is delivered at least
	// once, 20% twice, shuffled within windows, to competing workers.
	deliveries := make(chan []aggregate.Event)
	appendedAll := make(chan struct{})
	var delivered atomic.Int64
	// A worker's failure stops the deliveries, and a rebuild then waits in
	// vain for the live generation: the first one is reported with it.
	var workerErr atomic.Pointer[error]
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(deliveries)
		rng := rand.New(rand.NewPCG(33, 34))
		cursor := 0
		for {
			events := stream.All()
			if cursor == len(events) {
				select {
				case <-appendedAll:
					if cursor == len(stream.All()) {
						return nil
					}
				case <-gctx.Done():
					return gctx.Err()
				case <-time.After(2 * time.Millisecond):
				}
				continue
			}
			window := events[cursor:min(cursor+60, len(events))]
			cursor += len(window)
			var ds []aggregate.Event
			for _, e := range window {
				ds = append(ds, e)
				if rng.IntN(5) == 0 {
					ds = append(ds, e)
				}
			}
			rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
			for len(ds) > 0 {
				n := min(1+rng.IntN(20), len(ds))
				select {
				case deliveries <- ds[:n]:
				case <-gctx.Done():
					return gctx.Err()
				}
				ds = ds[n:]
			}
		}
	})
	for w := range 3 {
		proc := b.proc
		switch {
		case owners:
			var err error
			proc, err = projection.New(b.db.Pool, &projection.Config{Schema: b.db.Schema, MaxAttempts: 2, RetryBackoff: time.Millisecond, Owner: true},
				ledger.New(nil))
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, proc.Close(context.Background())) })
		case w > 0:
			proc = genProcessor(t, b.db, ledger.New(nil))
		}
		g.Go(func() error {
			for batch := range deliveries {
				if _, err := proc.Process(gctx, projection.Batch{Events: batch, Source: fmt.Sprintf("worker-%d", w)}); err != nil {
					err = fmt.Errorf("worker %d: %w", w, err)
					workerErr.CompareAndSwap(nil, &err)
					return err
				}
				delivered.Add(int64(len(batch)))
			}
			return nil
		})
	}

	// The readers, through the HTTP API of a processor of their own.
	readers := startGenReaders(ctx, t, b, all, 35, 0)

	// Appends go on while the rebuild works: a chunk at each of its
	// progress reports (replay transactions, catch-up batches, phase
	// changes, verification retries), the rest after the switch.
	var mu sync.Mutex
	next := initial
	appendChunk := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if next == len(all) {
			return false
		}
		hi := min(next+15, len(all))
		stream.Append(all[next:hi]...)
		next = hi
		return true
	}
	phases := map[string]int{}
	res, err := b.proc.Build(ctx, "ledger", &projection.BuildOptions{Stream: stream, BatchSize: 60, CatchUpEvents: 40,
		Progress: func(pr projection.BuildProgress) {
			if appendChunk() {
				phases[pr.Phase]++
			}
		}})
	if werr := workerErr.Load(); werr != nil {
		require.NoError(t, err, "and a worker failed: %v", *werr)
	}
	if err != nil {
		// What the live generation holds back, if anything.
		var parked []string
		rows, qerr := b.db.Pool.Query(context.Background(), `SELECT projection || ' ' || aggregate || ' ' || version FROM parked ORDER BY 1`)
		if qerr == nil {
			parked, qerr = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		t.Logf("parked: %v (%v); %d delivered", parked, qerr, delivered.Load())
		for _, q := range []string{
			`SELECT string_agg(projection || ' ' || aggregate || ' v' || version || ' parked ' || parked || ' rev ' || rev, '; ') FROM versions WHERE aggregate IN (SELECT aggregate FROM parked)`,
			`SELECT string_agg(payment_id || ' v' || version, '; ') FROM ledger_payments WHERE payment_id IN (SELECT aggregate FROM parked)`,
			`SELECT string_agg(gate_key || ' token ' || token || ' foreign ' || foreign_n || ' ' || holder, '; ') FROM owners`,
			`SELECT string_agg(projection || ' ' || aggregate || ' v' || version, '; ') FROM conflicts WHERE aggregate IN (SELECT aggregate FROM parked)`,
			`SELECT string_agg(projection || ' ' || aggregate || ' v' || version, '; ') FROM quarantine`,
		} {
			var v *string
			qerr := b.db.Pool.QueryRow(context.Background(), q).Scan(&v)
			if v == nil {
				v = new(string)
			}
			t.Logf("%s: %s (%v)", q, *v, qerr)
		}
	}
	require.NoError(t, err)
	readers.switched.Store(true)
	require.Equal(t, 2, res.Generation)
	for _, ph := range []string{projection.PhaseReplay, projection.PhaseCatchUp, projection.PhaseVerify} {
		require.Positive(t, phases[ph], "events appended during %s", ph)
	}
	for appendChunk() {
		time.Sleep(time.Millisecond)
	}
	close(appendedAll)
	require.NoError(t, g.Wait())
	require.NoError(t, readers.stop())
	t.Logf("%d deliveries, %d reads (%d after the switch), appends by phase %v", delivered.Load(), readers.reads.Load(), readers.afterSwitch.Load(), phases)

	genRequireBothFolds(t, b, all)
	if owners {
		var n int
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT count(*) FROM owners o JOIN generations g ON g.key = o.gate_key AND g.state = 'live' WHERE o.holder <> ''`).Scan(&n))
		require.Equal(t, 1, n, "no worker owns the live generation's key after the switch")
	}
}

// TestBuildCatchUpWindow is the window between the rebuild's last read of
// the stream and the switch: a worker of the new code version, whose view
// of the generations was read before the new generation entered catch-up,
// processes an event appended after that last read. Its transaction must
// see that the generations changed and feed the new generation; else the
// event would be in no generation of the new code, for good.
func TestBuildCatchUpWindow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := genSetup(t)
	events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(37, 38)), 30, 4)
	stream := newGenStream(events, 25)

	// A worker of code version 2, running before the rebuild: it feeds no
	// generation yet (generation 1 has code version 1).
	v2 := genProcessor(t, b.db, ledgertest.V2{Projection: ledger.New(nil)})
	res, err := v2.Process(ctx, projection.Batch{Events: events[:3]})
	require.NoError(t, err)
	for _, r := range res {
		require.Zero(t, r.Outcome, "fed nothing")
	}

	late, err := aggregate.New("late-1", 1, ledger.Authorized, ledger.Data{Payer: "a", Payee: "b", Amount: 5})
	require.NoError(t, err)
	var once sync.Once
	built, err := v2.Build(ctx, "ledger", &projection.BuildOptions{Stream: stream, Progress: func(pr projection.BuildProgress) {
		if pr.Phase != projection.PhaseVerify {
			return
		}
		once.Do(func() {
			// After the rebuild's last read: appended, and delivered to the
			// worker only.
			stream.Append(late)
			res, err := v2.Process(ctx, projection.Batch{Events: []aggregate.Event{late}})
			require.NoError(t, err)
			require.Equal(t, projection.Applied, res[0].Outcome)
		})
	}})
	require.NoError(t, err)
	require.Equal(t, 2, built.Generation)
	v, err := v2.ReadAggregate(ctx, "ledger", "late-1")
	require.NoError(t, err)
	require.True(t, v.Found)
	require.EqualValues(t, 1, v.Version)
	require.Equal(t, genFold(t, append(events, late)), genModel(t, b, genLive(t, b.proc).Schema))
	// Generation 1 (code version 1) never saw it: no worker of its code
	// version was given it.
	require.Equal(t, genFold(t, events), genModel(t, b, ""))
}
