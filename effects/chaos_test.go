package effects_test

import (
	"context"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/inorder/inorder/internal/proctest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/effects"
)

// envChaos set to "full" runs the bigger variant of TestExecutorsKilledAtRandom.
const envChaos = "INORDER_EFFECTS_CHAOS"

// chaosScale is the size of a TestExecutorsKilledAtRandom run.
type chaosScale struct {
	executors        int           // executor processes alive at once
	kills            time.Duration // how long executors are killed and restarted
	minLife, maxLife time.Duration // an executor's life before its SIGKILL
	batchEvery       time.Duration // how often intents are recorded
	drainers         int           // executors started after the last kill
}

func chaosScaleOf() chaosScale {
	if os.Getenv(envChaos) == "full" {
		return chaosScale{executors: 4, kills: 60 * time.Second, minLife: time.Second, maxLife: 3 * time.Second, batchEvery: 50 * time.Millisecond, drainers: 2}
	}
	return chaosScale{executors: 3, kills: 10 * time.Second, minLife: 300 * time.Millisecond, maxLife: 1500 * time.Millisecond, batchEvery: 80 * time.Millisecond, drainers: 2}
}

// chaosConfig is the executors' configuration: a 1 s call timeout (2 s
// claims), the pass every 200 ms, River's rescue after 8 s.
func chaosConfig(schema string) *effects.Config {
	return &effects.Config{
		Schema:            schema,
		Workers:           8,
		Timeout:           time.Second,
		RescueAfter:       8 * time.Second,
		ReconcileInterval: 200 * time.Millisecond,
		PollInterval:      100 * time.Millisecond,
		RetryBackoff:      20 * time.Millisecond,
		MaxBackoff:        200 * time.Millisecond,
	}
}

// TestExecutorsKilledAtRandom is the fault run of issue 21 in the suite:
// executors in child processes, each SIGKILLed after a random short life
// and replaced, work intents recorded meanwhile (batches of up to eight
// with a job each, larger ones through a relay job) against a receiver
// that counts deliveries by idempotency key, answers 503 to ~10% of first
// calls and answers ~3% only after the client's timeout (the effect
// applied: "did it arrive?"). After the last kill, fresh executors drain.
// It requires every recorded key delivered with its own payload and no
// other, every intent done and every River job finished, the intents the
// last kill left behind done within the recovery bound of it
// (Recovery.IntentBound plus a call, a backoff, the drainers' start, 300
// ms per round of the drainers' workers through them and a busy machine's
// slack) — whatever backlog the others form —, River's jobs within
// Recovery.JobBound,
// and no more repeated deliveries than the late answers and the kills
// explain. INORDER_EFFECTS_CHAOS=full runs it for a minute with 4
// executors.
func TestExecutorsKilledAtRandom(t *testing.T) {
	t.Parallel()
	scale := chaosScaleOf()
	b := setup(t, nil)
	ctx := t.Context()
	probe, err := effects.New(b.db.Pool, chaosConfig(b.db.Schema), handlers(b)...)
	require.NoError(t, err)
	rec := probe.Recovery()
	recv := newReceiver(rec.CallTimeout)
	t.Cleanup(recv.srv.Close)
	riverLeader(t, b.db.Pool, b.db.Schema, rec)
	env := envIdem + "=" + recv.srv.URL // the executors call the receiver

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 21))
	life := func() time.Duration {
		return scale.minLife + time.Duration(rng.Int64N(int64(scale.maxLife-scale.minLife)))
	}
	type executor struct {
		h    *proctest.Proc
		dies time.Time
	}
	execs := make([]executor, scale.executors)
	for i := range execs {
		execs[i] = executor{h: startHelper(t, "chaos", b, "", env), dies: time.Now().Add(life())}
	}

	want := map[string]string{} // key → args, as recorded
	batches, kills := 0, 0
	record := func(last bool) { // last: a relay batch
		n := 1 + rng.IntN(effects.DirectJobs)
		if rng.IntN(10) < 3 || last {
			n = effects.DirectJobs + 1 + rng.IntN(24) // a relay job
		}
		intents := make([]effects.Intent, n)
		for i := range intents {
			agg := "chaos-" + strconv.Itoa(batches) + "-" + strconv.Itoa(i)
			e, err := aggregate.New(agg, 1, "thing.happened", nil)
			require.NoError(t, err)
			args := `{"aggregate":"` + agg + `","batch":` + strconv.Itoa(batches) + `}`
			intents[i] = effects.Intent{Kind: kindNotify, Event: e, Args: jsonRaw(args)}
			want[intents[i].Key("notifier")] = args
		}
		b.record(t, intents...)
		batches++
	}
	end := time.Now().Add(scale.kills)
	recordUntil := end.Add(-3 * time.Second) // the last kills hit work, not a backlog
	tick := time.NewTicker(scale.batchEvery)
	for now := time.Now(); now.Before(end); now = <-tick.C {
		if now.Before(recordUntil) {
			record(false)
		}
		for i := range execs {
			if now.After(execs[i].dies) {
				execs[i].h.Kill(t)
				kills++
				execs[i] = executor{h: startHelper(t, "chaos", b, "", env), dies: now.Add(life())}
			}
		}
	}
	tick.Stop()
	// The last kill takes intents with it: a batch, killed once attempts
	// hold some of its intents.
	record(true)
	waitFor(t, time.Now().Add(waitTimeout), func() bool {
		return b.count(t, `SELECT count(*) FROM effects WHERE state = 'running'`) > 0
	})
	for i := range execs {
		execs[i].h.Kill(t)
		kills++
	}
	lastKill := time.Now()
	open := b.count(t, `SELECT count(*) FROM effects WHERE state <> 'done'`)
	// What the dead executors held: claimed intents, intents whose job
	// they had fetched, pending intents without a job of a batch whose
	// relay job they had.
	rows, err := b.db.Pool.Query(ctx, `SELECT key::text FROM effects WHERE state = 'running'
UNION SELECT e.key::text FROM river_job j JOIN effects e ON e.key = (j.args->>'key')::uuid
  WHERE j.state = 'running' AND j.kind = $1 AND e.state <> 'done'
UNION SELECT e.key::text FROM river_job j JOIN effects e ON e.batch = (j.args->>'batch')::bigint AND e.state = 'pending'
  WHERE j.state = 'running' AND j.kind = $2
    AND NOT EXISTS (SELECT 1 FROM river_job o WHERE o.kind = $1 AND o.args @> jsonb_build_object('key', e.key))`,
		effects.JobKind, effects.RelayJobKind)
	require.NoError(t, err)
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, held)

	// The drain: fresh executors, no kills.
	drainers := make([]*proctest.Proc, scale.drainers)
	for i := range drainers {
		drainers[i] = startHelper(t, "chaos", b, "", env)
	}
	// Nothing can take up an intent before an executor runs: the bound
	// counts from the last kill plus the drainers' start (a busy machine's
	// process start is not the recovery's).
	for _, h := range drainers {
		require.Equal(t, "working", h.Expect(t, "READY"))
	}
	started := time.Since(lastKill)
	// The held intents are work too: the drainers' workers take them up
	// in rounds, each a claim, a call and its record, on a machine the
	// rest of the suite keeps busy (472 held took 13.7 s once, against 2–3
	// s for the usual 30–100).
	workers := chaosConfig("").Workers * scale.drainers
	rounds := time.Duration((len(held) + workers - 1) / workers)
	const slack = 8 * time.Second // a busy 2-core machine
	intentBound := rec.IntentBound + rec.CallTimeout + chaosConfig("").MaxBackoff + started + rounds*300*time.Millisecond + slack
	recovered := waitFor(t, lastKill.Add(intentBound+30*time.Second), func() bool {
		return b.count(t, `SELECT count(*) FROM effects WHERE key = ANY($1::uuid[]) AND state <> 'done'`, held) == 0
	}).Sub(lastKill)
	intentsDrained := waitFor(t, lastKill.Add(intentBound+time.Minute), func() bool {
		return b.count(t, `SELECT count(*) FROM effects WHERE state <> 'done'`) == 0
	}).Sub(lastKill)
	jobBound := rec.JobBound + slack
	jobsDrained := waitFor(t, lastKill.Add(jobBound+30*time.Second), func() bool {
		return b.count(t, `SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'cancelled', 'discarded')`) == 0
	}).Sub(lastKill)
	for _, h := range drainers {
		h.Send(t, "EXIT")
	}
	for _, h := range drainers {
		h.RequireExit(t)
	}

	// Every key delivered, with its payload, and no other key.
	recv.mu.Lock()
	defer recv.mu.Unlock()
	dupKeys, extra := 0, 0
	for k, args := range want {
		require.GreaterOrEqual(t, recv.applied[k], 1, "key %s lost", k)
		require.Len(t, recv.bodies[k], 1, "one payload per key: %s", k)
		for body := range recv.bodies[k] {
			require.JSONEq(t, args, body, "key %s", k)
		}
		if recv.applied[k] > 1 {
			dupKeys++
			extra += recv.applied[k] - 1
		}
	}
	for k := range recv.calls {
		_, ok := want[k]
		require.True(t, ok, "unexpected key %q", k)
	}
	var recoveries, attempts int
	require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT coalesce(sum(recoveries), 0), coalesce(sum(attempts), 0) FROM effects`).Scan(&recoveries, &attempts))
	t.Logf("%d keys in %d batches, %d kills, %d open at the last, %d held by the dead executors; receiver: %d calls, %d refused (503), %d answered late; %d keys delivered twice or more (%.2f%%, %d repeated deliveries); %d attempts, %d recoveries; the drainers ready %s after the last kill, the held intents done %s after it (bound %s), all %s, River's jobs %s (bound %s)",
		len(want), batches, kills, open, len(held), recv.total, recv.refused, recv.late, dupKeys, 100*float64(dupKeys)/float64(len(want)), extra,
		attempts, recoveries, started.Round(10*time.Millisecond), recovered.Round(10*time.Millisecond), intentBound.Round(10*time.Millisecond), intentsDrained.Round(10*time.Millisecond),
		jobsDrained.Round(10*time.Millisecond), jobBound)
	require.Positive(t, recoveries, "the kills left intents for the pass to take up")
	require.LessOrEqual(t, recovered, intentBound, "the dead executors' intents done within the recovery bound")
	require.LessOrEqual(t, jobsDrained, jobBound, "River's jobs finished within River's rescue bound")
	// A repeated delivery comes from a late answer (the first call of a
	// key, applied after the client gave up) or from a call an executor
	// was making when it was killed: at most Workers per kill. More would
	// mean two attempts called at once.
	require.LessOrEqual(t, extra, recv.late+kills*chaosConfig("").Workers)
}

// riverLeader starts, in the test process, a River client that holds
// River's leadership on schema for the whole test and works no effect:
// River's maintenance (its rescuer, every 30 s from the start; its
// scheduler) runs there, as in a fleet where some process stays up. The
// executors' deaths then leave River's leadership alone, which keeps the
// test's River drain to one rescuer run after the last kill — and the
// intents' drain cannot be River's doing: its rescue of the last kills'
// jobs comes at the rescuer's run 30 s after the start, well after the
// intents' bound.
func riverLeader(t *testing.T, pool *pgxpool.Pool, schema string, rec effects.Recovery) {
	t.Helper()
	workers := river.NewWorkers() // the kinds, for the rescuer's retry decisions
	river.AddWorker(workers, &holdWorker[heldJob]{arg: func(a heldJob) string { return a.Key }})
	river.AddWorker(workers, &holdWorker[heldRelay]{arg: func(heldRelay) string { return "" }})
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:                   "chaos-test-leader",
		Schema:               schema,
		Queues:               map[string]river.QueueConfig{"chaos_test_leader": {MaxWorkers: 1}},
		Workers:              workers,
		JobTimeout:           rec.JobTimeout,
		RescueStuckJobsAfter: rec.RescueAfter,
		RetryPolicy:          soonRetry{}, // as the executors' backoff (≤ 200 ms), not River's attempt⁴ seconds
	})
	require.NoError(t, err)
	require.NoError(t, rc.Start(t.Context()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, rc.Stop(ctx))
	})
	var leader string
	waitFor(t, time.Now().Add(waitTimeout), func() bool {
		_ = pool.QueryRow(t.Context(), `SELECT leader_id FROM river_leader`).Scan(&leader)
		return leader == "chaos-test-leader"
	})
}

// soonRetry retries a rescued job after 20 ms.
type soonRetry struct{}

func (soonRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(20 * time.Millisecond) }

// jsonRaw is an intent's args given as JSON text.
type jsonRaw string

func (j jsonRaw) MarshalJSON() ([]byte, error) { return []byte(j), nil }

// waitFor polls cond (every 50 ms: what it waits for is the clock and
// other processes) until it holds, and returns when it did; it fails the
// test at deadline.
func waitFor(t *testing.T, deadline time.Time, cond func() bool) time.Time {
	t.Helper()
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out")
		time.Sleep(50 * time.Millisecond)
	}
	return time.Now()
}

// receiver is the webhook receiver of TestExecutorsKilledAtRandom: it
// counts the deliveries of every key (calls it applied) and the payloads
// they carried. The first call of a key is refused with a 503 for ~10% of
// keys, and applied but answered only after the caller gave up for ~3%;
// every other call is applied and answered 200.
type receiver struct {
	srv     *httptest.Server
	timeout time.Duration

	mu             sync.Mutex
	calls, applied map[string]int
	bodies         map[string]map[string]bool
	total          int
	refused, late  int
}

func newReceiver(timeout time.Duration) *receiver {
	r := &receiver{timeout: timeout, calls: map[string]int{}, applied: map[string]int{}, bodies: map[string]map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	key := req.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return // the caller died mid-request
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	fate := h.Sum32() % 100
	r.mu.Lock()
	r.total++
	r.calls[key]++
	first := r.calls[key] == 1
	if first && fate < 10 {
		r.refused++
		r.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	r.applied[key]++
	if r.bodies[key] == nil {
		r.bodies[key] = map[string]bool{}
	}
	r.bodies[key][string(body)] = true
	late := first && fate < 13
	if late {
		r.late++
	}
	r.mu.Unlock()
	if late {
		select {
		case <-req.Context().Done(): // the caller timed out
		case <-time.After(3 * r.timeout):
		}
	}
	w.WriteHeader(http.StatusOK)
}

// helperChaos is an executor of TestExecutorsKilledAtRandom: it works
// intents against the receiver (envIdem) until killed, or until the parent
// says EXIT.
func helperChaos(ctx context.Context, pool *pgxpool.Pool, c *proctest.Child) error {
	fx, err := effects.New(pool, chaosConfig(os.Getenv(envSchema)), &httpEffect{kind: kindNotify, url: os.Getenv(envIdem)})
	if err != nil {
		return err
	}
	if err := fx.Start(ctx); err != nil {
		return err
	}
	c.Say("READY", "working")
	if _, err := c.Await("EXIT"); err != nil {
		return err
	}
	return fx.Stop(ctx)
}
