package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/httpapi"
)

// hooks is a webhook receiver for the CLI's effects: it answers each key's
// calls with the statuses queued for it (200 when none are left) and
// records the calls.
type hooks struct {
	srv     *httptest.Server
	mu      sync.Mutex
	script  map[string][]int
	calls   map[string]int
	changed chan struct{}
}

func newHooks(t *testing.T) *hooks {
	h := &hooks{script: map[string][]int{}, calls: map[string]int{}, changed: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		h.mu.Lock()
		defer h.mu.Unlock()
		h.calls[key]++
		close(h.changed)
		h.changed = make(chan struct{})
		if q := h.script[key]; len(q) > 0 {
			h.script[key] = q[1:]
			w.WriteHeader(q[0])
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hooks) callsOf(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[key]
}

// waitCalls waits until key was called n times.
func (h *hooks) waitCalls(t *testing.T, key string, n int) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		h.mu.Lock()
		got, ch := h.calls[key], h.changed
		h.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			require.FailNow(t, "timed out waiting for webhook calls", "%s: %d of %d", key, got, n)
		}
	}
}

// fxBundle is a migrated schema (River's tables included) with the ledger
// recording settlement webhooks to a receiver, and the CLI configured with
// the webhook handler.
type fxBundle struct {
	*bundle
	hooks *hooks
	fx    *effects.Client // the test's own client, to seed intents

	mu       sync.Mutex
	attempts chan struct{} // closed and replaced at every attempt of the CLI's workers
}

func setupEffects(t *testing.T) *fxBundle {
	t.Helper()
	b := &fxBundle{bundle: setup(t), hooks: newHooks(t), attempts: make(chan struct{})}
	_, err := effects.MigrateRiver(t.Context(), b.db.Pool, &effects.RiverMigrateOptions{Schema: b.db.Schema})
	require.NoError(t, err)
	fxCfg := effects.Config{RetryBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, PollInterval: 50 * time.Millisecond,
		MaxAttempts: 3, ReconcileInterval: 100 * time.Millisecond,
		OnAttempt: func(effects.Attempt) {
			b.mu.Lock()
			defer b.mu.Unlock()
			close(b.attempts)
			b.attempts = make(chan struct{})
		}}
	b.cfg.Effects = []effects.Handler{&ledger.Webhook{URL: b.hooks.srv.URL}}
	b.cfg.EffectsConfig = fxCfg
	fxCfg.Schema = b.db.Schema
	b.fx, err = effects.New(b.db.Pool, &fxCfg, b.cfg.Effects...)
	require.NoError(t, err)
	require.Equal(t, 1, effects.Bind(b.fx, b.ledger))
	return b
}

// capture records a settlement of payment agg and returns its intent's key.
func (b *fxBundle) capture(t *testing.T, agg string) string {
	t.Helper()
	c := event(t, agg, 2, ledger.Captured, ledger.Data{Amount: 400})
	b.process(t, authorized(t, agg), c)
	return effects.Intent{Kind: ledger.SettledWebhook, Event: c}.Key("ledger")
}

func TestEffectsCommands(t *testing.T) {
	t.Parallel()

	t.Run("ListShowStatus", func(t *testing.T) {
		t.Parallel()
		b := setupEffects(t)
		k := b.capture(t, "pay-1")
		var list []effects.Effect
		b.runJSON(t, &list, "effects", "list")
		require.Len(t, list, 1)
		require.Equal(t, k, list[0].Key)
		require.Equal(t, effects.Pending, list[0].State)
		require.Equal(t, "pay-1", list[0].Aggregate)
		require.Equal(t, int64(2), list[0].Version)
		require.JSONEq(t, `{"payment":"pay-1","payer":"customer-1","payee":"merchant-1","amount":400,"captured":400,"version":2}`, string(list[0].Args))
		out := b.runOK(t, "effects", "list", "--state", "pending")
		require.Contains(t, out, k)
		require.Contains(t, b.runOK(t, "effects", "list", "--state", "failed"), "no effect intents")
		var shown effects.Effect
		b.runJSON(t, &shown, "effects", "show", k)
		require.Equal(t, list[0].Key, shown.Key)
		require.Contains(t, b.runOK(t, "effects", "show", k), ledger.SettledWebhook)

		var st httpapi.StatusResponse
		b.runJSON(t, &st, "status")
		require.Equal(t, []effects.KindStats{{Kind: ledger.SettledWebhook, Pending: 1, OldestPending: st.Effects[0].OldestPending}}, st.Effects)
		require.Contains(t, b.runOK(t, "status"), "EFFECT KIND")

		_, _, err := b.run(t, "effects", "list", "--state", "bogus")
		require.ErrorIs(t, err, cli.ErrUsage)
		_, _, err = b.run(t, "effects", "show", "no-such-key")
		require.ErrorIs(t, err, effects.ErrNotFound)
	})

	t.Run("WorkRetryCancel", func(t *testing.T) {
		t.Parallel()
		b := setupEffects(t)
		ok, bad, dropped := b.capture(t, "pay-ok"), b.capture(t, "pay-bad"), b.capture(t, "pay-drop")
		b.hooks.mu.Lock()
		b.hooks.script[bad] = []int{http.StatusUnprocessableEntity}
		b.hooks.script[dropped] = []int{http.StatusGone}
		b.hooks.mu.Unlock()

		ctx, stop := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() {
			_, _, err := b.runCtx(ctx, "effects", "work", "--effects-workers", "2")
			done <- err
		}()
		b.hooks.waitCalls(t, ok, 1)
		b.hooks.waitCalls(t, bad, 1)
		b.hooks.waitCalls(t, dropped, 1)
		b.waitEffect(t, bad, effects.Failed)
		b.waitEffect(t, dropped, effects.Failed)
		b.waitEffect(t, ok, effects.Done)

		var failed []effects.Effect
		b.runJSON(t, &failed, "effects", "list", "--state", "failed")
		require.Len(t, failed, 2)

		// Cancel needs a reason; a done intent refuses both actions.
		_, _, err := b.run(t, "effects", "cancel", dropped)
		require.ErrorIs(t, err, cli.ErrUsage)
		// --dry-run says what would happen and changes nothing.
		out := b.runOK(t, "effects", "cancel", dropped, "--reason", "the partner deleted the account", "--dry-run")
		require.Contains(t, out, "would be cancelled (dry run")
		b.requireState(t, dropped, effects.Failed)
		var dry []cli.ActionResult
		b.runJSON(t, &dry, "effects", "retry", bad, "--dry-run")
		require.Equal(t, []cli.ActionResult{{Action: "effect-retry", Key: bad, State: effects.Retrying, DryRun: true}}, dry)
		b.requireState(t, bad, effects.Failed)
		out, _, err = b.run(t, "effects", "retry", ok, "--dry-run")
		require.Error(t, err, "a dry run is refused as the action would be")
		require.Contains(t, out, "refused")
		require.Equal(t, 1, b.hooks.callsOf(bad), "a dry run retry queues nothing")

		out = b.runOK(t, "effects", "cancel", dropped, "--reason", "the partner deleted the account", "--by", "alice")
		require.Contains(t, out, "now cancelled")
		out, _, err = b.run(t, "effects", "retry", ok)
		require.Error(t, err)
		require.Contains(t, out, "refused")

		// The fixed receiver takes the retried one; the worker still runs.
		out = b.runOK(t, "effects", "retry", bad)
		require.Contains(t, out, "now retrying")
		b.hooks.waitCalls(t, bad, 2)
		b.waitEffect(t, bad, effects.Done)
		stop()
		require.NoError(t, <-done)
		require.Equal(t, 1, b.hooks.callsOf(ok))
		require.Equal(t, 1, b.hooks.callsOf(dropped), "a cancelled intent is not called again")

		var logged int
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM operator_log
WHERE action IN ('effect-retry', 'effect-cancel') AND projection = 'ledger'`).Scan(&logged))
		require.Equal(t, 2, logged, "the operator log has the cancel and the retry, not the dry runs")
		var by string
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT actor FROM operator_log WHERE action = 'effect-cancel'`).Scan(&by))
		require.Equal(t, "alice", by)
	})

	t.Run("Serve", func(t *testing.T) {
		t.Parallel()
		b := setupEffects(t)
		b.capture(t, "pay-1")
		stderr, stop := b.start(t, "serve", "--http-addr", "127.0.0.1:0")
		url := stderr.wait(t, regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+)`))[1]
		resp, err := http.Get(url + "/v1/status")
		require.NoError(t, err)
		var st httpapi.StatusResponse
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
		resp.Body.Close()
		require.Len(t, st.Effects, 1)
		require.Equal(t, int64(1), st.Effects[0].Pending)
		resp, err = http.Get(url + "/metrics")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Contains(t, string(body), `inorder_effects_intents{kind="`+ledger.SettledWebhook+`",state="pending"} 1`)
		stop()
	})

	t.Run("NeedsRiver", func(t *testing.T) {
		t.Parallel()
		b := &fxBundle{bundle: setup(t), hooks: newHooks(t)}
		b.cfg.Effects = []effects.Handler{&ledger.Webhook{URL: b.hooks.srv.URL}}
		_, _, err := b.run(t, "effects", "list")
		require.ErrorIs(t, err, effects.ErrRiverNotMigrated)
		require.ErrorContains(t, err, "migrate")
		out := b.runOK(t, "migrate")
		require.Contains(t, out, "River's migrations")
		b.runOK(t, "effects", "list")
		out = b.runOK(t, "migrate", "status")
		require.Contains(t, out, "River (schema "+b.db.Schema+")")
		require.NotRegexp(t, `(?m)\spending(\s+-)?\s*$`, out, "every migration applied")
	})

	t.Run("RiverSchema", func(t *testing.T) {
		t.Parallel()
		b := &fxBundle{bundle: setup(t), hooks: newHooks(t)}
		b.cfg.Effects = []effects.Handler{&ledger.Webhook{URL: b.hooks.srv.URL}}
		river := b.db.Schema + "_river"
		t.Cleanup(func() {
			_, err := b.db.Pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+river+` CASCADE`)
			require.NoError(t, err)
		})
		b.env["INORDER_RIVER_SCHEMA"] = river
		require.Contains(t, b.runOK(t, "migrate"), "to schema "+river)
		require.NoError(t, effects.CheckRiver(t.Context(), b.db.Pool, river))
		b.runOK(t, "effects", "list")
		_, _, err := b.run(t, "effects", "list", "--river-schema", "not-valid")
		require.ErrorIs(t, err, cli.ErrUsage)
	})

	t.Run("WithoutHandlers", func(t *testing.T) {
		t.Parallel()
		// Intents recorded by a binary with handlers; an operator's shell
		// without the webhook's URL (a binary without handlers) lists,
		// shows and recovers them: that needs only the tables.
		b := setupEffects(t)
		k := b.capture(t, "pay-1")
		b.cfg.Effects = nil
		var list []effects.Effect
		b.runJSON(t, &list, "effects", "list")
		require.Len(t, list, 1)
		require.Equal(t, k, list[0].Key)
		require.False(t, list[0].Orphaned)
		require.Contains(t, b.runOK(t, "effects", "show", k), ledger.SettledWebhook)
		var st httpapi.StatusResponse
		b.runJSON(t, &st, "status")
		require.Len(t, st.Effects, 1)
		require.Equal(t, ledger.SettledWebhook, st.Effects[0].Kind)
		require.Equal(t, int64(1), st.Effects[0].Pending)
		require.Contains(t, b.runOK(t, "status"), "EFFECT KIND")

		// Its River job fetched by a client that died an hour ago: the
		// intent is an orphan, listed as such, and the pass recovers it.
		_, err := b.db.Pool.Exec(t.Context(), `UPDATE river_job SET state = 'running', attempt = 1,
  attempted_at = now() - interval '1 hour', attempted_by = ARRAY['dead-client'] WHERE args->>'key' = $1`, k)
		require.NoError(t, err)
		b.runJSON(t, &list, "effects", "list", "--orphaned")
		require.Len(t, list, 1)
		require.True(t, list[0].Orphaned)
		require.Regexp(t, regexp.MustCompile(`(?m)^`+k+`\s.*\spending\s+0\s+no\s+yes\s+0\s`), b.runOK(t, "effects", "list"))
		b.runJSON(t, &st, "status")
		require.Equal(t, int64(1), st.Effects[0].Orphaned)
		out := b.runOK(t, "effects", "reconcile")
		require.Contains(t, out, "requeued 1 intents whose executor died (0 claims expired, 1 jobs and 0 relay jobs of dead clients)")
		var shown effects.Effect
		b.runJSON(t, &shown, "effects", "show", k)
		require.False(t, shown.Orphaned)
		require.Equal(t, 1, shown.Recoveries)
		require.Equal(t, effects.Pending, shown.State)
		b.runJSON(t, &list, "effects", "list", "--orphaned")
		require.Empty(t, list)

		_, _, err = b.run(t, "effects", "work")
		require.ErrorContains(t, err, "no effect handlers")

		// A schema without intents: no effects section.
		e := setup(t)
		st = httpapi.StatusResponse{}
		e.runJSON(t, &st, "status")
		require.Empty(t, st.Effects)
		require.NotContains(t, e.runOK(t, "status"), "EFFECT KIND")
	})

	t.Run("RecoveryFlags", func(t *testing.T) {
		t.Parallel()
		b := setupEffects(t)
		for _, args := range [][]string{
			{"--effects-call-timeout", "0s"},
			{"--effects-call-timeout", "2s", "--effects-lease", "2s"},
			{"--effects-call-timeout", "2s", "--effects-rescue-after", "8s"},
			{"--effects-reconcile-interval", "0s"},
		} {
			_, _, err := b.run(t, append([]string{"effects", "work"}, args...)...)
			require.ErrorIs(t, err, cli.ErrUsage, "%v", args)
			_, _, err = b.run(t, append([]string{"run"}, args...)...)
			require.ErrorIs(t, err, cli.ErrUsage, "run %v", args)
		}
		b.env["INORDER_EFFECTS_LEASE"] = "soon"
		_, _, err := b.run(t, "effects", "work")
		require.ErrorIs(t, err, cli.ErrUsage)

		// The variables and flags reach the executor, which logs its policy.
		b.env["INORDER_EFFECTS_LEASE"] = ""
		b.env["INORDER_EFFECTS_CALL_TIMEOUT"] = "3s"
		stderr, stop := b.start(t, "effects", "work", "--effects-reconcile-interval", "2s", "--effects-rescue-after", "1m")
		line := stderr.wait(t, regexp.MustCompile(`effects workers started.*`))[0]
		stop()
		for _, want := range []string{"call_timeout=3s", "lease=6s", "reconcile_interval=2s", "rescue_after=1m0s", "intent_recovery_bound=8.05s"} {
			require.Contains(t, line, want)
		}
	})
}

// start runs the command line in the background, its stdout discarded,
// and returns its stderr to wait on and its stop, which cancels it and
// requires that it returned nil.
func (b *bundle) start(t *testing.T, args ...string) (*notifyWriter, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	stderr := &notifyWriter{changed: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		cfg := b.cfg
		cfg.Stdout, cfg.Stderr = io.Discard, stderr
		cfg.Getenv = func(k string) string { return b.env[k] }
		done <- cli.Run(ctx, cfg, args)
	}()
	return stderr, func() {
		t.Helper()
		cancel()
		require.NoError(t, <-done)
	}
}

// runCtx is run with ctx.
func (b *bundle) runCtx(ctx context.Context, args ...string) (string, string, error) {
	var stdout, stderr strings.Builder
	cfg := b.cfg
	cfg.Stdout, cfg.Stderr = &syncWriter{w: &stdout}, &syncWriter{w: &stderr}
	cfg.Getenv = func(k string) string { return b.env[k] }
	err := cli.Run(ctx, cfg, args)
	return stdout.String(), stderr.String(), err
}

// waitEffect waits until the intent of key is in state, re-reading it
// whenever an attempt of the CLI's workers recorded its outcome.
// requireState fails unless the intent of key is in state now.
func (b *fxBundle) requireState(t *testing.T, key string, state effects.State) {
	t.Helper()
	e, err := b.fx.Get(t.Context(), key)
	require.NoError(t, err)
	require.Equal(t, state, e.State)
}

func (b *fxBundle) waitEffect(t *testing.T, key string, state effects.State) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		b.mu.Lock()
		ch := b.attempts
		b.mu.Unlock()
		e, err := b.fx.Get(t.Context(), key)
		require.NoError(t, err)
		if e.State == state {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			require.FailNow(t, "timed out", "intent %s is %s, waiting for %s", key, e.State, state)
		}
	}
}

// notifyWriter collects output and wakes waiters at every write.
type notifyWriter struct {
	mu      sync.Mutex
	b       strings.Builder
	changed chan struct{}
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.changed)
	w.changed = make(chan struct{})
	return w.b.Write(p)
}

// wait waits until the output matches re and returns the submatches.
func (w *notifyWriter) wait(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		w.mu.Lock()
		m, ch := re.FindStringSubmatch(w.b.String()), w.changed
		w.mu.Unlock()
		if m != nil {
			return m
		}
		select {
		case <-ch:
		case <-deadline:
			require.FailNow(t, "timed out waiting for "+re.String())
		}
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
