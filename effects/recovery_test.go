package effects_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inorder/inorder/internal/proctest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/projection"
)

// TestDeadExecutorStates leaves an intent in each state a SIGKILL of its
// executor can leave it in, with River's rescue out of reach (RescueAfter
// 1 h), and requires that the listings show the orphans and that the
// reconciliation pass of another executor takes every one up:
//   - job: its River job fetched by a client that died before claiming it
//     (pending);
//   - relay: its batch's relay job fetched by a client that died before
//     enqueueing the batch's jobs (pending, no job of its own);
//   - settled: its attempt's outcome recorded (retrying) and the process
//     killed before River recorded the job's;
//   - claimed: its attempt killed after the call (running, claim held).
func TestDeadExecutorStates(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{config: func(c *effects.Config) {
		c.Timeout = time.Second // claims of 2 s
		c.RescueAfter = time.Hour
	}})
	ctx := t.Context()

	// job and relay: a River client whose workers hold the jobs, killed.
	hold := startHelper(t, "hold", b, "")
	require.Equal(t, "ready", hold.Expect(t, "READY"))
	kJob := b.record(t, intent(t, kindNotify, "job"))[0]
	var batch []effects.Intent
	for i := range effects.DirectJobs + 2 {
		batch = append(batch, intent(t, kindNotify, "relay-"+strconv.Itoa(i)))
	}
	kRelay := b.record(t, batch...)
	held := map[string]string{}
	for range 2 {
		p := hold.Expect(t, "HELD")
		kind, arg, _ := strings.Cut(p, " ")
		held[kind] = arg
	}
	require.Equal(t, kJob, held[effects.JobKind])
	require.NotEmpty(t, held[effects.RelayJobKind])
	hold.Kill(t)

	// settled: a 503, recorded as retrying; killed before River's update.
	kSettled := b.record(t, intent(t, kindNotify, "settled"))[0]
	b.idem.setScript(func(key string, n int) reply {
		if key == kSettled && n == 1 {
			return reply{status: http.StatusServiceUnavailable}
		}
		return reply{}
	})
	settled := startHelper(t, "settled", b, "")
	require.Equal(t, kSettled, settled.Expect(t, "SETTLED"))
	settled.Kill(t)

	// claimed: killed after the call, before recording its outcome.
	kClaimed := b.record(t, intent(t, kindNotify, "claimed"))[0]
	claimed := startHelper(t, "kill", b, kindNotify)
	require.Equal(t, kClaimed, claimed.Expect(t, "CALLED"))
	claimed.Kill(t)

	all := append([]string{kJob, kSettled, kClaimed}, kRelay...)
	state := map[string]effects.State{kJob: effects.Pending, kSettled: effects.Retrying, kClaimed: effects.Running}
	for _, k := range kRelay {
		state[k] = effects.Pending
	}
	// Once the lease (2 s) has passed since they were taken, every one is
	// an orphan: listed, counted, with its dead River job still running.
	var orphans []effects.Effect
	deadline := time.Now().Add(waitTimeout)
	for {
		var err error
		orphans, err = b.fx.List(ctx, projection.ListOptions{Orphaned: true})
		require.NoError(t, err)
		if len(orphans) == len(all) {
			break
		}
		if !time.Now().Before(deadline) {
			// Which one is not listed, and where it stands.
			listed := map[string]bool{}
			for _, e := range orphans {
				listed[e.Key] = true
			}
			for _, k := range all {
				if !listed[k] {
					e, err := b.fx.Get(ctx, k)
					t.Logf("not listed as an orphan: %s (expected %s): %+v %v", k, state[k], e, err)
				}
			}
		}
		require.True(t, time.Now().Before(deadline), "orphans listed: %d of %d", len(orphans), len(all))
		time.Sleep(100 * time.Millisecond) // the lease runs out by the clock alone
	}
	for _, e := range orphans {
		require.Equal(t, state[e.Key], e.State, e.Key)
		require.True(t, e.Orphaned)
		require.Zero(t, e.Recoveries)
	}
	e, err := b.fx.Get(ctx, kJob)
	require.NoError(t, err)
	require.True(t, e.Orphaned, "Get marks it too")
	listed, err := b.fx.List(ctx, projection.ListOptions{State: string(effects.Pending)})
	require.NoError(t, err)
	require.Len(t, listed, 1+len(kRelay))
	for _, e := range listed {
		require.True(t, e.Orphaned, "a plain listing marks orphans")
	}
	stats, err := b.fx.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(len(all)), stats[0].Orphaned+stats[1].Orphaned)
	rows, err := b.db.Pool.Query(ctx, `SELECT id FROM river_job WHERE state = 'running'`)
	require.NoError(t, err)
	dead, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, dead, 4, "the dead clients' jobs: effect, relay, settled, claimed")

	// A new executor's pass takes them all up; River's rescuer does not
	// (RescueAfter is an hour): the dead jobs stay running.
	reg := prometheus.NewRegistry()
	require.NoError(t, b.fx.RegisterMetrics(reg))
	b.start(t)
	for _, k := range all {
		b.waitState(t, k, effects.Done)
	}
	for _, k := range all {
		e, err := b.fx.Get(ctx, k)
		require.NoError(t, err)
		require.Equal(t, 1, e.Recoveries, "%s (%s) recovered once", k, state[k])
		require.False(t, e.Orphaned)
		require.Equal(t, 1, b.idem.appliedOf(k))
	}
	require.Len(t, b.idem.callsOf(kJob), 1)
	require.Len(t, b.idem.callsOf(kSettled), 2, "the 503, then the retry")
	require.Len(t, b.idem.callsOf(kClaimed), 2, "the dead attempt's call, then the retry with the same key")
	for _, k := range kRelay {
		require.Len(t, b.idem.callsOf(k), 1)
	}
	require.Equal(t, len(dead), b.count(t, `SELECT count(*) FROM river_job WHERE state = 'running' AND id = ANY($1)`, dead),
		"the intents did not wait for River's rescue")
	recovered := func(cause string) float64 {
		return metricValue(t, reg, "inorder_effects_recoveries_total", map[string]string{"kind": kindNotify, "cause": cause})
	}
	require.Equal(t, 2.0, recovered(effects.RecoveredJobDied), "job and settled")
	require.Equal(t, float64(len(kRelay)), recovered(effects.RecoveredRelayDied))
	require.Equal(t, 1.0, recovered(effects.RecoveredClaimExpired))
	stats, err = b.fx.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, stats[0].Orphaned+stats[1].Orphaned)
}

// metricValue returns the value of the counter or gauge name{labels} of
// reg; it fails the test if there is no such series.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	require.FailNow(t, "no such series", "%s%v", name, labels)
	return 0
}

// heldJob and heldRelay are the args of effect and relay jobs, as a River
// client that is not inorder's reads them.
type heldJob struct {
	Key string `json:"key"`
}

func (heldJob) Kind() string { return effects.JobKind }

type heldRelay struct {
	Batch int64 `json:"batch"`
}

func (heldRelay) Kind() string { return effects.RelayJobKind }

// holdWorker reports the jobs it is given and holds them until killed.
type holdWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	arg func(T) string
	c   *proctest.Child
}

func (w *holdWorker[T]) Work(ctx context.Context, job *river.Job[T]) error {
	w.c.Say("HELD", job.Kind+" "+w.arg(job.Args))
	<-ctx.Done()
	return ctx.Err()
}

// helperHold is a River client on the effects queue whose workers take
// effect and relay jobs and hold them, as an executor killed right after
// River fetched them would.
func helperHold(ctx context.Context, pool *pgxpool.Pool, c *proctest.Child) error {
	workers := river.NewWorkers()
	river.AddWorker(workers, &holdWorker[heldJob]{arg: func(a heldJob) string { return a.Key }, c: c})
	river.AddWorker(workers, &holdWorker[heldRelay]{arg: func(a heldRelay) string { return strconv.FormatInt(a.Batch, 10) }, c: c})
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:            os.Getenv(envSchema),
		Queues:            map[string]river.QueueConfig{effects.DefaultQueue: {MaxWorkers: 4}},
		Workers:           workers,
		FetchCooldown:     20 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		JobTimeout:        -1,
	})
	if err != nil {
		return err
	}
	if err := rc.Start(ctx); err != nil {
		return err
	}
	c.Say("READY", "ready")
	<-ctx.Done()
	return errors.New("not killed in time")
}

// helperSettled works intents; after the first attempt recorded as
// retrying it reports SETTLED and waits, in River's worker, to be killed:
// River never records the job's outcome.
func helperSettled(ctx context.Context, pool *pgxpool.Pool, c *proctest.Child) error {
	settled := make(chan string, 1)
	cfg := helperConfig(func(a effects.Attempt) {
		if a.State == effects.Retrying {
			settled <- a.Key
			<-ctx.Done()
		}
	})
	cfg.ReconcileInterval = time.Hour
	fx, err := effects.New(pool, cfg, &httpEffect{kind: kindNotify, url: os.Getenv(envIdem)})
	if err != nil {
		return err
	}
	if err := fx.Start(ctx); err != nil {
		return err
	}
	select {
	case k := <-settled:
		c.Say("SETTLED", k)
	case <-ctx.Done():
		return fmt.Errorf("nothing settled: %w", ctx.Err())
	}
	<-ctx.Done()
	return errors.New("not killed in time")
}

// TestDeadReconcilePass: a reconciliation pass that died while asking
// Reconcile about a failed intent leaves it running under an expired
// claim of the pass's own (no River job). Another pass hands it back to
// failed — not to retrying: its attempts ran out, so nothing may call it —
// and asks again later.
func TestDeadReconcilePass(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := t.Context()
	k := b.record(t, intent(t, kindChecked, "pass"))[0]
	// As claimFailed leaves it: the intent failed uncertain, then claimed by
	// the pass, whose process died (its claim is past).
	_, err := b.db.Pool.Exec(ctx, `UPDATE effects SET state = 'running', uncertain = true, attempts = 25, claim = claim + 1,
  job_id = NULL, lease_until = now() - interval '1 second', last_error = 'remote answered 503' WHERE key = $1`, k)
	require.NoError(t, err)
	// Its first job would claim a pending intent: it must leave this one.
	b.start(t)
	e := b.waitState(t, k, effects.Failed) // the next pass's Reconcile: not applied
	require.Equal(t, 1, e.Recoveries)
	require.False(t, e.Uncertain, "Reconcile said the remote does not have it")
	require.Equal(t, 25, e.Attempts)
	require.Empty(t, b.plain.callsOf(k), "never performed")
	require.Equal(t, 1, b.plain.checksOf(k))
}
