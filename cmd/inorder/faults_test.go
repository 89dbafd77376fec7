package main_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/benchtest"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb/esdbtest"
)

// The TestRebuildUnderFaults workload. INORDER_FAULT_RATE sets the append
// rate (events/s) for a heavier run by hand, such as the 2,000 events/s of
// docs/benchmarks.md.
const (
	faultInitial  = 1000 // payments (of faultVersions events) before the rebuild
	faultVersions = 5
	faultRate     = 300                   // events appended per second, in bursts every faultTick
	faultTick     = 50 * time.Millisecond // the append period
	faultWorkers  = 3
	faultReaders  = 4
)

// faultPayments appends payments × versions ledger events to the env's
// EventStoreDB, payment ids from offset, each payment's versions in order
// in its own stream, and returns them.
func (e *env) faultPayments(seed uint64, offset, payments, versions int) ([]aggregate.Event, error) {
	events := ledger.Generate(rand.New(rand.NewPCG(seed, seed)), payments, versions)
	for i := range events {
		var n int
		if _, err := fmt.Sscanf(events[i].Aggregate, "pay-%d", &n); err != nil {
			return nil, err
		}
		events[i].Aggregate = fmt.Sprintf("pay-%07d", offset+n)
		if _, err := e.esdb.Append(streamPrefix+events[i].Aggregate, esdbtest.Event{ID: uuid.New(), Type: events[i].Type, Data: events[i].Data}); err != nil {
			return nil, err
		}
	}
	return events, nil
}

// TestRebuildUnderFaults is the fault run of a side-by-side rebuild as
// separate processes: three 'inorder run' workers share a persistent
// subscription (deliveries shuffled across them, and redelivered when one
// dies) and one of them is SIGKILLed, and started again, every 1–3 s from
// before the rebuild until after its switch; events are appended in bursts
// at a steady rate throughout; 'inorder rebuild' is SIGKILLed during its
// replay and started again, with the default verify timeout; four readers
// check every read of an 'inorder serve' against the in-order fold at the
// version it reports. The rebuild must switch while the appends and the
// kills go on, soon after its replay's end; no process may log an error;
// at the end both generations equal the fold of everything appended. It
// reports the switch's delay and the latency from an append to its read
// (probes: one-event payments) before and during the switch.
func TestRebuildUnderFaults(t *testing.T) {
	t.Parallel()
	rate := faultRate
	if s := os.Getenv("INORDER_FAULT_RATE"); s != "" {
		var err error
		rate, err = strconv.Atoi(s)
		require.NoError(t, err, "INORDER_FAULT_RATE")
	}
	perTick := max(rate/int(time.Second/faultTick)/faultVersions, 1) // payments per burst
	e := newEnv(t)
	e.run(t, "migrate")
	var folds ledgertest.Folds
	var amu sync.Mutex
	var all []aggregate.Event
	appendPayments := func(seed uint64, offset, payments, versions int) error {
		evs, err := e.faultPayments(seed, offset, payments, versions)
		if err != nil {
			return err
		}
		amu.Lock()
		all = append(all, evs...)
		amu.Unlock()
		return folds.Add(evs)
	}
	appended := func() int {
		amu.Lock()
		defer amu.Unlock()
		return len(all)
	}
	require.NoError(t, appendPayments(1, 0, faultInitial, faultVersions))

	// Every process logs at warn: anything at error is an error surfaced.
	var pmu sync.Mutex
	var procs []*process
	startProc := func(args ...string) *process {
		p := e.start(t, args...)
		pmu.Lock()
		procs = append(procs, p)
		pmu.Unlock()
		return p
	}
	worker := []string{"run", "--mode", "persistent", "--group", "faults", "--workers", "2", "--batch-size", "50",
		"--max-wait", "5ms", "--http-addr", "", "--log-level", "warn"}
	var wmu sync.Mutex
	workers := make([]*process, faultWorkers)
	for i := range workers {
		workers[i] = startProc(worker...)
	}
	serve := startProc("serve", "--http-addr", "127.0.0.1:0", "--log-level", "info")
	base := serve.baseURL(t)
	e.waitApplied(t, int64(appended()), 3*time.Minute)

	stop := make(chan struct{})
	g := new(errgroup.Group)
	// The appender: a burst of perTick payments every faultTick.
	appendingFrom := time.Now()
	var appendingTo time.Time
	g.Go(func() error {
		tick := time.NewTicker(faultTick)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				appendingTo = time.Now()
				return nil
			case <-tick.C:
			}
			if err := appendPayments(uint64(100+i), 100_000+perTick*i, perTick, faultVersions); err != nil {
				return err
			}
		}
	})
	// The killer: one worker SIGKILLed, and started again, every 1–3 s.
	var kills atomic.Int64
	g.Go(func() error {
		rng := rand.New(rand.NewPCG(5, 6))
		for {
			select {
			case <-stop:
				return nil
			case <-time.After(time.Second + time.Duration(rng.Int64N(int64(2*time.Second)))):
			}
			i := rng.IntN(faultWorkers)
			wmu.Lock()
			p := workers[i]
			wmu.Unlock()
			if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				return err
			}
			<-p.done
			kills.Add(1)
			wmu.Lock()
			workers[i] = startProc(worker...)
			wmu.Unlock()
		}
	})
	// The readers.
	var reads atomic.Int64
	for r := range faultReaders {
		g.Go(func() error {
			rng := rand.New(rand.NewPCG(7, uint64(r)))
			client := &http.Client{Timeout: 10 * time.Second}
			seen := map[string]int64{}
			for {
				select {
				case <-stop:
					return nil
				default:
				}
				ok, err := folds.ReadAny(t.Context(), client, base, rng, seen)
				if err != nil {
					return err
				}
				if ok {
					reads.Add(1)
				}
			}
		})
	}
	// The probes: a one-event payment appended every 50 ms, and the time
	// until the API serves it (each probe waits on its own).
	var probes benchtest.Latencies
	g.Go(func() error {
		client := &http.Client{Timeout: 10 * time.Second}
		var pg errgroup.Group
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return pg.Wait()
			case <-tick.C:
			}
			at := time.Now()
			if err := appendPayments(uint64(1_000_000+i), 9_000_000+i, 1, 1); err != nil {
				return err
			}
			id := fmt.Sprintf("pay-%07d", 9_000_000+i)
			pg.Go(func() error {
				for {
					resp, err := client.Get(base + "/v1/projections/ledger/aggregates/" + id)
					if err != nil {
						return err
					}
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						break
					}
					if time.Since(at) > 2*time.Minute {
						return fmt.Errorf("probe %s never applied", id)
					}
					time.Sleep(5 * time.Millisecond)
				}
				probes.Add(at, time.Since(at))
				return nil
			})
		}
	})

	// The rebuild: SIGKILLed in its replay, then run again to the end.
	time.Sleep(4 * time.Second) // kills and appends before the rebuild
	rebuildAt := time.Now()
	phaseAt := map[string]time.Time{}
	// watch polls generation 2's phase, noting when each is first seen,
	// until it is live or, after one more poll, until says so.
	watch := func(until func() bool) {
		for last := false; !last; {
			last = until()
			state, phase := e.genPhase(t, 2)
			if _, ok := phaseAt[phase]; phase != "" && !ok {
				phaseAt[phase] = time.Now()
			}
			if state == projection.StateLive {
				if _, ok := phaseAt["live"]; !ok {
					phaseAt["live"] = time.Now()
				}
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	first := startProc("rebuild", "ledger", "--replay-batch-size", "500")
	watch(func() bool { _, ok := phaseAt[projection.PhaseReplay]; return ok })
	time.Sleep(time.Duration(rand.IntN(100)) * time.Millisecond)
	first.signal(t, syscall.SIGKILL)
	require.Error(t, first.wait(t, 30*time.Second))
	state, phase := e.genPhase(t, 2)
	require.Equal(t, projection.StateBuilding, state, "killed while building")
	require.Equal(t, projection.PhaseReplay, phase, "killed in its replay")
	resumedAt := time.Now()
	phaseAt = map[string]time.Time{projection.PhaseReplay: phaseAt[projection.PhaseReplay]}
	final := startProc("rebuild", "ledger", "--replay-batch-size", "500", "--json", "--log-level", "warn")
	watch(func() bool {
		select {
		case <-final.done:
			return true
		default:
			return false
		}
	})
	require.NoError(t, final.wait(t, 3*time.Minute), "the rebuild succeeds under load, with the default verify timeout")
	switchedAt := phaseAt["live"]
	atSwitch := appended()
	time.Sleep(3 * time.Second) // appends, kills and reads after the switch
	close(stop)
	require.NoError(t, g.Wait())

	// Everything appended reaches both generations.
	total := appended()
	amu.Lock()
	events := slices.Clone(all)
	amu.Unlock()
	e.waitApplied(t, int64(total), 3*time.Minute)
	var schema string
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT schema FROM generations WHERE projection = 'ledger' AND generation = 2 AND state = 'live'`).Scan(&schema))
	deadline := time.Now().Add(2 * time.Minute)
	for e.count(t, `SELECT coalesce(sum(version), 0)::bigint FROM `+pgx.Identifier{schema, "ledger_payments"}.Sanitize()) != int64(total) {
		require.True(t, time.Now().Before(deadline), "not every event applied to the new generation")
		time.Sleep(20 * time.Millisecond)
	}
	want, err := ledger.Fold(events)
	require.NoError(t, err)
	require.Equal(t, want, e.genModel(t, schema), "the new generation equals the in-order fold")
	require.Equal(t, want, e.genModel(t, ""), "the previous generation too")
	var st projection.Status
	e.runJSON(t, &st, "status")
	for _, p := range st.Projections {
		require.Zero(t, p.Parked, "%s: parked", p.Name)
		require.Zero(t, p.Quarantined, "%s: quarantined", p.Name)
		require.Zero(t, p.Conflicts, "%s: conflicts", p.Name)
	}
	pmu.Lock()
	for _, p := range procs {
		for _, line := range strings.Split(p.stderr.String(), "\n") {
			require.NotContains(t, line, "level=ERROR", "inorder %s", strings.Join(p.cmd.Args[1:], " "))
		}
	}
	pmu.Unlock()

	// The figures.
	replayEnd := phaseAt[projection.PhaseCatchUp]
	require.False(t, replayEnd.IsZero(), "phases seen: %v", phaseAt)
	require.False(t, switchedAt.IsZero())
	require.Less(t, atSwitch, total, "appends went on after the switch")
	before, during := probes.Split(rebuildAt, replayEnd, switchedAt)
	q := func(ds []time.Duration, f float64) time.Duration {
		return benchtest.Quantile(ds, f).Round(time.Millisecond)
	}
	t.Logf("appended %d events (%d before the rebuild, then %.0f/s for %v, asked %d/s), %d worker SIGKILLs, %d whole reads",
		total, faultInitial*faultVersions, float64(total-faultInitial*faultVersions)/appendingTo.Sub(appendingFrom).Seconds(),
		appendingTo.Sub(appendingFrom).Round(time.Second), rate, kills.Load(), reads.Load())
	t.Logf("rebuild: killed in its replay; resumed, replay ended %v after the resume, switch %v after the replay's end (%d of %d events appended at the switch)",
		replayEnd.Sub(resumedAt).Round(time.Millisecond), switchedAt.Sub(replayEnd).Round(time.Millisecond), atSwitch, total)
	t.Logf("append to read: before the rebuild p50 %v p99 %v max %v (%d probes); from the replay's end to the switch p50 %v p99 %v max %v (%d probes)",
		q(before, .5), q(before, .99), q(before, 1), len(before), q(during, .5), q(during, .99), q(during, 1), len(during))
	require.Positive(t, kills.Load())
	require.Positive(t, reads.Load())
	require.Less(t, switchedAt.Sub(replayEnd), projection.DefaultVerifyTimeout/2, "the switch waited for one lag, not for quiet")
}
