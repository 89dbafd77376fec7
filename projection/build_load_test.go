package projection_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/benchtest"
	"github.com/inorder/inorder/projection"
)

// The TestRebuildUnderLoad workload.
const (
	loadInitial  = 1000                   // events in the stream before the rebuild starts
	loadRate     = 10                     // events appended every loadTick: 400 events/s
	loadTick     = 25 * time.Millisecond  // the append period
	loadLag      = 750 * time.Millisecond // how long an event waits before the broker delivers it
	loadWorkers  = 3
	loadCrashOne = 12 // one batch in loadCrashOne is abandoned mid-transaction and redelivered
)

// TestRebuildUnderLoad rebuilds the ledger side by side while the stream
// never goes quiet: events are appended at a steady rate from before the
// rebuild starts until after it switched, and delivered to three competing
// workers (processors of their own) by a broker that lags — an event is
// delivered no sooner than loadLag after it was appended, so the workers
// are always behind what the rebuild reads — shuffled within windows,
// 30% of them twice, and with one batch in loadCrashOne abandoned mid
// transaction (its context cancelled, as a worker dying would) and
// delivered again later. Readers check every read of the HTTP API against
// the in-order fold. The rebuild runs with the default verify timeout and
// must switch while appends go on; the test reports how long after the
// replay's end it switched, and the writers' latency (Process calls) during
// the verification and switch against before the rebuild. At the end both
// generations equal the fold of everything appended.
func TestRebuildUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := genSetup(t)
	all := ledger.Generate(rand.New(rand.NewPCG(27, 1)), 300, 30)
	stream := newGenStream(nil, 100)

	// The appender: every loadTick, the next loadRate events, with the
	// time they were appended.
	var amu sync.Mutex
	var appendedAt []time.Time
	appended := func() int {
		amu.Lock()
		defer amu.Unlock()
		return len(appendedAt)
	}
	appendN := func(n int) bool {
		amu.Lock()
		defer amu.Unlock()
		lo := len(appendedAt)
		hi := min(lo+n, len(all))
		stream.Append(all[lo:hi]...)
		now := time.Now()
		for range hi - lo {
			appendedAt = append(appendedAt, now)
		}
		return hi < len(all)
	}
	appendN(loadInitial)
	stopAppending := make(chan struct{})
	appender, actx := errgroup.WithContext(ctx)
	appender.Go(func() error {
		tick := time.NewTicker(loadTick)
		defer tick.Stop()
		for {
			select {
			case <-stopAppending:
				return nil
			case <-actx.Done():
				return actx.Err()
			case <-tick.C:
				if !appendN(loadRate) {
					return nil
				}
			}
		}
	})

	// The broker: events older than loadLag, shuffled within windows of
	// 60, 30% twice; abandoned batches come back first.
	deliveries := make(chan []aggregate.Event)
	var rmu sync.Mutex
	var redeliver [][]aggregate.Event
	drain := make(chan struct{}) // closed: deliver everything, no lag
	// busy counts the batches sent and not yet processed or given back.
	var busy atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	var brokerDone atomic.Bool
	g.Go(func() error {
		defer close(deliveries)
		rng := rand.New(rand.NewPCG(27, 2))
		cursor := 0
		send := func(ds []aggregate.Event) error {
			busy.Add(1)
			select {
			case deliveries <- ds:
				return nil
			case <-gctx.Done():
				return gctx.Err()
			}
		}
		for {
			rmu.Lock()
			var again []aggregate.Event
			if len(redeliver) > 0 {
				again, redeliver = redeliver[0], redeliver[1:]
			}
			rmu.Unlock()
			if again != nil {
				if err := send(again); err != nil {
					return err
				}
				continue
			}
			amu.Lock()
			ready := len(appendedAt)
			n := ready
			quick := false
			select {
			case <-drain:
				quick = true
			default:
			}
			for !quick && ready > cursor && time.Since(appendedAt[ready-1]) < loadLag {
				ready--
			}
			amu.Unlock()
			if ready == cursor {
				if quick && ready == n && busy.Load() == 0 {
					rmu.Lock()
					idle := len(redeliver) == 0
					rmu.Unlock()
					if idle {
						brokerDone.Store(true)
						return nil
					}
				}
				select {
				case <-gctx.Done():
					return gctx.Err()
				case <-time.After(5 * time.Millisecond):
				}
				continue
			}
			events := stream.All()
			window := events[cursor:min(cursor+60, ready)]
			cursor += len(window)
			var ds []aggregate.Event
			for _, e := range window {
				ds = append(ds, e)
				if rng.IntN(10) < 3 {
					ds = append(ds, e)
				}
			}
			rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
			for len(ds) > 0 {
				n := min(10+rng.IntN(30), len(ds))
				if err := send(ds[:n]); err != nil {
					return err
				}
				ds = ds[n:]
			}
		}
	})

	// The workers. Each Process call's start and duration is recorded.
	var calls benchtest.Latencies
	var crashes atomic.Int64
	for w := range loadWorkers {
		proc := b.proc
		if w > 0 {
			proc = genProcessor(t, b.db, ledger.New(nil))
		}
		rng := rand.New(rand.NewPCG(27, 10+uint64(w)))
		g.Go(func() error {
			for batch := range deliveries {
				pctx, cancel := gctx, context.CancelFunc(func() {})
				crash := rng.IntN(loadCrashOne) == 0
				if crash {
					pctx, cancel = context.WithTimeout(gctx, time.Duration(rng.IntN(20))*time.Millisecond)
				}
				start := time.Now()
				_, err := proc.Process(pctx, projection.Batch{Events: batch, Source: fmt.Sprintf("worker-%d", w)})
				took := time.Since(start)
				cancel()
				switch {
				case err != nil && crash && gctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
					// The worker "died" mid-batch: unacknowledged, the batch
					// comes back.
					crashes.Add(1)
					rmu.Lock()
					redeliver = append(redeliver, batch)
					rmu.Unlock()
				case err != nil:
					return fmt.Errorf("worker %d: %w", w, err)
				default:
					if !crash {
						calls.Add(start, took)
					}
				}
				busy.Add(-1)
			}
			return nil
		})
	}

	// The readers, through the HTTP API of a processor of their own.
	readers := startGenReaders(ctx, t, b, all, 27, 20)

	// Let the workers reach their steady lag before the rebuild starts.
	for calls.Len() < 50 {
		time.Sleep(10 * time.Millisecond)
	}
	rebuildStart := time.Now()
	var pmu sync.Mutex
	phaseAt := map[string]time.Time{}
	var notes []string
	res, err := b.proc.Build(ctx, "ledger", &projection.BuildOptions{Stream: stream,
		Progress: func(pr projection.BuildProgress) {
			pmu.Lock()
			defer pmu.Unlock()
			if _, ok := phaseAt[pr.Phase]; !ok {
				phaseAt[pr.Phase] = time.Now()
			}
			if pr.Note != "" {
				notes = append(notes, pr.Note)
			}
		}})
	switchedAt := time.Now()
	readers.switched.Store(true)
	pmu.Lock()
	for ph, at := range phaseAt {
		t.Logf("phase %s at %v", ph, at.Sub(rebuildStart).Round(time.Millisecond))
	}
	t.Logf("switched at %v, %d notes: %.600v", switchedAt.Sub(rebuildStart).Round(time.Millisecond), len(notes), notes)
	pmu.Unlock()
	require.NoError(t, err, "notes: %v", notes)
	require.Equal(t, 2, res.Generation)
	atSwitch := appended()
	require.Less(t, atSwitch, len(all), "the stream was still being appended to when the rebuild switched")

	// Appends go on a while after the switch; then everything is delivered.
	for appended() < atSwitch+4*loadRate && appended() < len(all) {
		time.Sleep(loadTick)
	}
	close(stopAppending)
	require.NoError(t, appender.Wait())
	close(drain)
	require.NoError(t, g.Wait())
	require.True(t, brokerDone.Load())
	require.NoError(t, readers.stop())

	total := appended()
	genRequireBothFolds(t, b, all[:total])

	// The figures.
	pmu.Lock()
	replayEnd := phaseAt[projection.PhaseCatchUp]
	verifyAt := phaseAt[projection.PhaseVerify]
	pmu.Unlock()
	require.False(t, replayEnd.IsZero())
	before, during := calls.Split(rebuildStart, verifyAt, switchedAt)
	p := benchtest.Quantile
	retries := 0
	for _, n := range notes {
		if len(n) > 7 && n[:7] == "verify:" {
			retries++
		}
	}
	t.Logf("appended %d events at %d/s (%d before the rebuild), delivered with a lag of %v, %d worker crashes; %d reads (%d after the switch)",
		total, loadRate*int(time.Second/loadTick), loadInitial, loadLag, crashes.Load(), readers.reads.Load(), readers.afterSwitch.Load())
	t.Logf("rebuild: replay %v, switch %v after the replay's end (verification %v, %d retries), stream appended to throughout (%d of %d events at the switch)",
		replayEnd.Sub(rebuildStart).Round(time.Millisecond), switchedAt.Sub(replayEnd).Round(time.Millisecond),
		switchedAt.Sub(verifyAt).Round(time.Millisecond), retries, atSwitch, len(all))
	t.Logf("writers' Process calls: before the rebuild p50 %v p99 %v max %v (%d calls); during verification and switch p50 %v p99 %v max %v (%d calls)",
		p(before, .5).Round(time.Millisecond), p(before, .99).Round(time.Millisecond), p(before, 1).Round(time.Millisecond), len(before),
		p(during, .5).Round(time.Millisecond), p(during, .99).Round(time.Millisecond), p(during, 1).Round(time.Millisecond), len(during))
	require.Less(t, switchedAt.Sub(replayEnd), projection.DefaultVerifyTimeout/2, "the switch waited for one lag, not for quiet")
}
