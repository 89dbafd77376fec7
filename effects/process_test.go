package effects_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inorder/inorder/internal/proctest"
	"github.com/inorder/inorder/internal/streamtest"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/projection"
)

// The multi-process tests re-execute the test binary as a helper process
// (a proctest role named by its mode: same, kill, hold, settled, chaos),
// with these variables naming what the helper works on.
const (
	envURL      = "INORDER_EFFECTS_HELPER_DB_URL" // the test schema's URL
	envSchema   = "INORDER_EFFECTS_HELPER_SCHEMA"
	envIdem     = "INORDER_EFFECTS_HELPER_IDEMPOTENT" // the idempotent remote's URL
	envPlain    = "INORDER_EFFECTS_HELPER_PLAIN"      // the other remote's URL
	envKind     = "INORDER_EFFECTS_HELPER_KIND"       // kill: the effect kind
	helperLimit = 90 * time.Second
)

const (
	sameProcs, sameGoroutines = 3, 4
	sameVersions              = 3 // rounds: versions 1, 2, 3 of one aggregate
	extraJobs                 = 3 // more jobs per key than the one Record enqueued
)

// TestProcessesSameEvent is the seed's test across processes: the same event
// delivered at once by 4 goroutines in each of 3 processes records one
// intent and one job; then, with 3 more jobs per key enqueued on purpose,
// the 3 processes work them at once — and the remote gets exactly one call
// per key: the intents table decides, not River.
func TestProcessesSameEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	es := events(t, "same", sameVersions)
	helpers := make([]*proctest.Proc, sameProcs)
	for i := range helpers {
		helpers[i] = startHelper(t, "same", b, "")
	}
	for v, e := range es {
		for _, h := range helpers {
			require.Equal(t, strconv.Itoa(v), h.Expect(t, "READY"))
		}
		for _, h := range helpers {
			h.Send(t, "GO")
		}
		var applied, duplicates, recorded int
		for _, h := range helpers {
			var r sameResult
			require.NoError(t, json.Unmarshal([]byte(h.Expect(t, "RESULT")), &r))
			applied, duplicates, recorded = applied+r.Applied, duplicates+r.Duplicate, recorded+r.Recorded
		}
		require.Equal(t, 1, applied, "version %d", e.Version)
		require.Equal(t, sameProcs*sameGoroutines-1, duplicates)
		require.Equal(t, 1, recorded, "one transaction recorded the intent")
		k := keyOf(kindNotify, e)
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM effects WHERE key = $1`, k))
		require.Equal(t, 1, b.jobsOf(t, k))
		for range extraJobs {
			_, err := b.fx.Retry(t.Context(), k)
			require.NoError(t, err)
		}
		require.Equal(t, 1+extraJobs, b.jobsOf(t, k))
	}
	for _, h := range helpers {
		h.Send(t, "WORK")
	}
	// Every job ends (River's completed events, reported by the helpers),
	// and every intent is settled once.
	settled, finished := map[string]int{}, map[string]int{}
	want := len(es) * (1 + extraJobs)
	n := 0
	for n < want || len(settled) < len(es) {
		kind, payload := expectAny(t, helpers, "SETTLED", "JOBDONE")
		if kind == "SETTLED" {
			settled[payload]++
		} else {
			finished[payload]++
			n++
		}
	}
	for _, h := range helpers {
		h.Send(t, "EXIT")
	}
	for _, h := range helpers {
		h.RequireExit(t)
	}
	calls := b.idem.callsByKey()
	require.Len(t, calls, len(es))
	for _, e := range es {
		k := keyOf(kindNotify, e)
		require.Equal(t, 1, settled[k], "one process settled %s v%d", e.Aggregate, e.Version)
		require.Equal(t, 1+extraJobs, finished[k])
		require.Equal(t, 1, calls[k], "one remote call for v%d", e.Version)
		got, err := b.fx.Get(t.Context(), k)
		require.NoError(t, err)
		require.Equal(t, effects.Done, got.State)
		require.Equal(t, 1, got.Attempts)
	}
}

type sameResult struct{ Applied, Duplicate, Recorded int }

// TestKillAfterCall kills the effect worker's process with SIGKILL after the
// remote side answered and before the outcome is recorded: the intent stays
// running, uncertain, its claim held by a dead process. Once the claim
// expires, the reconciliation pass of another worker takes it up.
//   - idempotent remote: the retry calls again with the same key; the remote
//     sees two calls and applies one;
//   - remote without idempotency, with Reconcile: the retry asks, finds it
//     done, and does not call again.
func TestKillAfterCall(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{kindNotify, kindChecked} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			k := b.record(t, intent(t, kind, "victim"))[0]
			rem := b.idem
			if kind == kindChecked {
				rem = b.plain
			}
			h := startHelper(t, "kill", b, kind)
			require.Equal(t, k, h.Expect(t, "CALLED"))
			require.Len(t, rem.callsOf(k), 1)
			require.Equal(t, 1, rem.appliedOf(k))
			e, err := b.fx.Get(t.Context(), k)
			require.NoError(t, err)
			require.Equal(t, effects.Running, e.State)
			require.True(t, e.Uncertain, "the call's outcome is not recorded")
			require.Equal(t, 1, e.Attempts)
			h.Kill(t)

			b.start(t) // claims of 2×Timeout; the pass runs every 100 ms
			e = b.waitState(t, k, effects.Done)
			require.False(t, e.Uncertain)
			require.Equal(t, 1, rem.appliedOf(k), "the remote applied it once")
			last := b.seen.of(k)
			require.NotEmpty(t, last)
			if kind == kindNotify {
				require.Len(t, rem.callsOf(k), 2, "the retry called again, with the same key")
				require.Equal(t, 2, e.Attempts)
				require.True(t, last[len(last)-1].Called)
			} else {
				require.Len(t, rem.callsOf(k), 1, "not called again")
				require.Equal(t, 1, rem.checksOf(k))
				require.Equal(t, 1, e.Attempts)
				require.True(t, last[len(last)-1].Reconciled)
				require.False(t, last[len(last)-1].Called)
			}
		})
	}
}

func TestMain(m *testing.M) {
	proctest.Main(m, map[string]proctest.Role{
		"same":    helperRole(helperSame),
		"kill":    helperRole(helperKill),
		"hold":    helperRole(helperHold),
		"settled": helperRole(helperSettled),
		"chaos":   helperRole(helperChaos),
	})
}

// helperRole runs a helper process's body for at most helperLimit, on a pool
// of the test schema's database.
func helperRole(run func(ctx context.Context, pool *pgxpool.Pool, c *proctest.Child) error) proctest.Role {
	return func(ctx context.Context, c *proctest.Child) error {
		ctx, cancel := context.WithTimeout(ctx, helperLimit)
		defer cancel()
		pc, err := pgxpool.ParseConfig(c.Getenv(envURL))
		if err != nil {
			return err
		}
		pc.MaxConns = 16 // River's listener, fetcher, completer and elector, and the workers
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return err
		}
		defer pool.Close()
		return run(ctx, pool, c)
	}
}

// helperConfig is the effects configuration of a helper.
func helperConfig(onAttempt func(effects.Attempt)) *effects.Config {
	return &effects.Config{
		Schema:            os.Getenv(envSchema),
		Timeout:           time.Second,
		RetryBackoff:      20 * time.Millisecond,
		MaxBackoff:        200 * time.Millisecond,
		ReconcileInterval: 100 * time.Millisecond,
		PollInterval:      50 * time.Millisecond,
		OnAttempt:         onAttempt,
	}
}

// helperSame delivers each round's event from several goroutines at once
// through its own processor, then works the jobs, reporting settled intents
// and finished jobs, until the parent says EXIT.
func helperSame(ctx context.Context, pool *pgxpool.Pool, c *proctest.Child) error {
	fx, err := effects.New(pool, helperConfig(func(a effects.Attempt) {
		if a.State == effects.Done {
			c.Say("SETTLED", a.Key)
		}
	}), &httpEffect{kind: kindNotify, url: os.Getenv(envIdem)})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	recorded := 0
	n := &notifier{fx: fx, kind: kindNotify}
	counting := &countingNotifier{notifier: n, recorded: &recorded, mu: &mu}
	proc, err := projection.New(pool, &projection.Config{Schema: os.Getenv(envSchema)}, counting)
	if err != nil {
		return err
	}
	for v := range sameVersions {
		e, err := aggregate.New("same", int64(v+1), "thing.happened", map[string]any{"n": v + 1})
		if err != nil {
			return err
		}
		c.Say("READY", strconv.Itoa(v))
		if _, err := c.Await("GO"); err != nil {
			return err
		}
		mu.Lock()
		recorded = 0
		mu.Unlock()
		counts, err := streamtest.AtOnce(ctx, proc, e, sameGoroutines)
		if err != nil {
			return err
		}
		for o := range counts {
			if o != projection.Applied && o != projection.Duplicate {
				return fmt.Errorf("outcome %v", o)
			}
		}
		mu.Lock()
		r := sameResult{Applied: counts[projection.Applied], Duplicate: counts[projection.Duplicate], Recorded: recorded}
		mu.Unlock()
		raw, _ := json.Marshal(r)
		c.Say("RESULT", string(raw))
	}
	if _, err := c.Await("WORK"); err != nil {
		return err
	}
	jobs, unsubscribe := effects.SubscribeJobs(fx)
	defer unsubscribe()
	go func() {
		for ev := range jobs {
			if ev.Kind == river.EventKindJobCompleted {
				var args struct{ Key string }
				if json.Unmarshal(ev.Job.EncodedArgs, &args) == nil {
					c.Say("JOBDONE", args.Key)
				}
			}
		}
	}()
	if err := fx.Start(ctx); err != nil {
		return err
	}
	if _, err := c.Await("EXIT"); err != nil {
		return err
	}
	return fx.Stop(ctx)
}

// countingNotifier is the notifier, counting the intents its transactions
// recorded (committed or not: a transaction that recorded one and then
// lost its version write would be a bug too).
type countingNotifier struct {
	*notifier
	mu       *sync.Mutex
	recorded *int
}

func (c *countingNotifier) ApplyBatch(ctx context.Context, tx *projection.Tx, events []aggregate.Event) error {
	intents := make([]effects.Intent, len(events))
	for i, e := range events {
		intents[i] = effects.Intent{Kind: c.kind, Event: e, Args: map[string]any{"aggregate": e.Aggregate, "version": e.Version}}
	}
	n, err := c.fx.Record(ctx, tx, intents...)
	c.mu.Lock()
	*c.recorded += n
	c.mu.Unlock()
	return err
}

// helperKill works the intents with a handler that, once the remote side
// answered, reports CALLED and waits to be killed: the outcome is never
// recorded.
func helperKill(ctx context.Context, pool *pgxpool.Pool, c *proctest.Child) error {
	called := make(chan string, 1)
	after := func(e *effects.Effect) {
		called <- e.Key
		<-ctx.Done() // SIGKILL comes first
	}
	h := effects.Handler(&httpEffect{kind: kindNotify, url: os.Getenv(envIdem), after: after})
	if os.Getenv(envKind) == kindChecked {
		h = &checkedEffect{httpEffect{kind: kindChecked, url: os.Getenv(envPlain), after: after}}
	}
	cfg := helperConfig(nil)
	cfg.ReconcileInterval = time.Hour
	fx, err := effects.New(pool, cfg, h)
	if err != nil {
		return err
	}
	if err := fx.Start(ctx); err != nil {
		return err
	}
	select {
	case k := <-called:
		c.Say("CALLED", k)
	case <-ctx.Done():
		return ctx.Err()
	}
	<-ctx.Done()
	return errors.New("not killed in time")
}

// startHelper starts a helper process of mode on the bundle's schema;
// env adds variables ("NAME=value").
func startHelper(t *testing.T, mode string, b *bundle, kind string, env ...string) *proctest.Proc {
	t.Helper()
	vars := map[string]string{envURL: b.db.URL, envSchema: b.db.Schema,
		envIdem: b.idem.srv.URL, envPlain: b.plain.srv.URL, envKind: kind}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	return proctest.Start(t, mode, proctest.Options{Name: mode + " helper", Env: vars, Timeout: helperLimit})
}

// expectAny waits for the next protocol line of any of the helpers, which
// must be one of kinds.
func expectAny(t *testing.T, hs []*proctest.Proc, kinds ...string) (kind, payload string) {
	t.Helper()
	cases := make([]reflect.SelectCase, 0, len(hs)+1)
	for _, h := range hs {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(h.Messages())})
	}
	timer := time.NewTimer(helperLimit)
	defer timer.Stop()
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)})
	for {
		i, v, ok := reflect.Select(cases)
		switch {
		case i == len(hs):
			require.FailNow(t, "helpers timed out", "waiting for %v", kinds)
		case !ok: // that helper exited: wait for the others
			cases[i].Chan = reflect.Value{}
		default:
			m := v.Interface().(proctest.Msg)
			require.Contains(t, kinds, m.Kind, "a helper said %s %q", m.Kind, m.Payload)
			return m.Kind, m.Payload
		}
	}
}
