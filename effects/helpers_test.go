package effects_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// waitTimeout bounds every wait of these tests.
const waitTimeout = 60 * time.Second

// Effect kinds of the tests: notify calls a remote that dedupes by key (an
// idempotent remote); notify.checked calls one that applies every call (not
// idempotent) and can be asked whether it has a key (Reconcile).
const (
	kindNotify  = "notify"
	kindChecked = "notify.checked"
)

// remote is the fake remote service: an HTTP server in the test process
// that records every call with its idempotency key. POST /effect applies
// the effect of the Idempotency-Key header (once per key when idempotent,
// on every call otherwise), unless its script says otherwise; GET
// /effect/{key} answers 200 when the key was applied, 404 when not.
type remote struct {
	srv        *httptest.Server
	idempotent bool

	mu      sync.Mutex
	calls   []call
	applied map[string]int // times each key's effect was applied
	checks  map[string]int // GET /effect/{key} per key
	script  func(key string, n int) reply
	// checkScript, if set, gives the status of the n-th GET of a key
	// instead of the truth (0: the truth).
	checkScript func(key string, n int) int
	changed     chan struct{} // closed and replaced on every call
}

// call is one POST the remote received.
type call struct {
	key    string
	at     time.Time
	status int
}

// reply is what the script makes the remote do with the n-th call of a key.
type reply struct {
	status int  // default 200
	apply  bool // apply even though status is not 2xx (an error after the effect)
	hang   bool // after applying (if it does), wait until the caller gives up
}

func newRemote(t *testing.T, idempotent bool) *remote {
	t.Helper()
	r := &remote{idempotent: idempotent, applied: map[string]int{}, checks: map[string]int{}, changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /effect", r.post)
	mux.HandleFunc("GET /effect/{key}", r.get)
	r.srv = httptest.NewServer(mux)
	t.Cleanup(r.srv.Close)
	return r
}

func (r *remote) post(w http.ResponseWriter, req *http.Request) {
	key := req.Header.Get("Idempotency-Key")
	_, _ = io.Copy(io.Discard, req.Body)
	r.mu.Lock()
	n := 1
	for _, c := range r.calls {
		if c.key == key {
			n++
		}
	}
	rep := reply{status: http.StatusOK}
	if r.script != nil {
		rep = r.script(key, n)
		if rep.status == 0 {
			rep.status = http.StatusOK
		}
	}
	if key != "" && (rep.status < 300 || rep.apply) && (!r.idempotent || r.applied[key] == 0) {
		r.applied[key]++
	}
	r.calls = append(r.calls, call{key: key, at: time.Now(), status: rep.status})
	r.signal()
	r.mu.Unlock()
	if rep.hang {
		<-req.Context().Done()
		return
	}
	w.WriteHeader(rep.status)
}

func (r *remote) get(w http.ResponseWriter, req *http.Request) {
	key := req.PathValue("key")
	r.mu.Lock()
	r.checks[key]++
	done := r.applied[key] > 0
	status := 0
	if r.checkScript != nil {
		status = r.checkScript(key, r.checks[key])
	}
	r.signal()
	r.mu.Unlock()
	if status != 0 {
		w.WriteHeader(status)
		return
	}
	if done {
		w.WriteHeader(http.StatusOK)
		return
	}
	w.WriteHeader(http.StatusNotFound)
}

// signal wakes the waiters; r.mu is held.
func (r *remote) signal() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *remote) setScript(s func(key string, n int) reply) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.script = s
}

func (r *remote) setCheckScript(s func(key string, n int) int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checkScript = s
}

// callsOf returns the calls of key.
func (r *remote) callsOf(key string) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for _, c := range r.calls {
		if c.key == key {
			out = append(out, c)
		}
	}
	return out
}

// callsByKey returns the number of calls per key.
func (r *remote) callsByKey() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, c := range r.calls {
		out[c.key]++
	}
	return out
}

func (r *remote) appliedOf(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied[key]
}

func (r *remote) checksOf(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.checks[key]
}

// waitCalls waits until key has been called n times.
func (r *remote) waitCalls(t *testing.T, key string, n int) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		r.mu.Lock()
		got := 0
		for _, c := range r.calls {
			if c.key == key {
				got++
			}
		}
		ch := r.changed
		r.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			require.FailNow(t, "remote: timed out", "waiting for %d calls of %s, got %d", n, key, got)
		}
	}
}

// httpEffect performs effects by POSTing to the remote with the key as
// Idempotency-Key: 2xx is done, 4xx (but 408 and 429) permanent, anything
// else an error worth a retry.
type httpEffect struct {
	kind string
	url  string
	// after, if set, runs once the remote answered (the SIGKILL tests stop
	// there).
	after func(e *effects.Effect)
}

func (h *httpEffect) Kind() string { return h.kind }

func (h *httpEffect) Perform(ctx context.Context, e *effects.Effect) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+"/effect", strings.NewReader(string(e.Args)))
	if err != nil {
		return effects.Permanent(err)
	}
	req.Header.Set("Idempotency-Key", e.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("post: %w", err)
	}
	resp.Body.Close()
	if h.after != nil {
		h.after(e)
	}
	return classify(resp.StatusCode)
}

func classify(status int) error {
	switch {
	case status < 300:
		return nil
	case status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests:
		return effects.Permanent(fmt.Errorf("remote answered %d", status))
	default:
		return fmt.Errorf("remote answered %d", status)
	}
}

// checkedEffect is httpEffect plus Reconcile: GET /effect/{key}.
type checkedEffect struct{ httpEffect }

func (h *checkedEffect) Reconcile(ctx context.Context, e *effects.Effect) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url+"/effect/"+e.Key, nil)
	if err != nil {
		return false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	default:
		return false, fmt.Errorf("remote answered %d", resp.StatusCode)
	}
}

// notifier is the test projection: its read model keeps each aggregate's
// version, and every event it applies records one intent of its kind.
type notifier struct {
	fx   *effects.Client
	kind string
	salt string
	// fail, if set, makes ApplyBatch fail after recording its intents.
	fail func(events []aggregate.Event) error
	// ahead, if set, queues a statement of the handler's own ahead of
	// Record's insert, in the same pipeline.
	ahead func(tx *projection.Tx)
}

func (n *notifier) Name() string { return "notifier" }

func (n *notifier) Setup(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS fx_model (aggregate text PRIMARY KEY, version bigint NOT NULL)`)
	return err
}

func (n *notifier) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE fx_model`)
	return err
}

func (n *notifier) ApplyBatch(ctx context.Context, tx *projection.Tx, events []aggregate.Event) error {
	var aggs []string
	var vers []int64
	intents := make([]effects.Intent, len(events))
	for i, e := range events {
		if i+1 == len(events) || events[i+1].Aggregate != e.Aggregate {
			aggs, vers = append(aggs, e.Aggregate), append(vers, e.Version)
		}
		intents[i] = effects.Intent{Kind: n.kind, Event: e, Salt: n.salt, Args: map[string]any{"aggregate": e.Aggregate, "version": e.Version}}
	}
	tx.Queue(`INSERT INTO fx_model AS m (aggregate, version) SELECT * FROM unnest($1::text[], $2::bigint[])
ON CONFLICT (aggregate) DO UPDATE SET version = EXCLUDED.version`, aggs, vers)
	if n.ahead != nil {
		n.ahead(tx)
	}
	if _, err := n.fx.Record(ctx, tx, intents...); err != nil {
		return err
	}
	if n.fail != nil {
		return n.fail(events)
	}
	return nil
}

// bundle is one test's schema (River's tables included), fake remotes,
// effects client and processor.
type bundle struct {
	db       *pgtest.DB
	idem     *remote // idempotent, for kindNotify
	plain    *remote // not idempotent, for kindChecked
	fx       *effects.Client
	proc     *projection.Processor
	notifier *notifier
	seen     *attempts
}

type setupOpts struct {
	kind   string // the notifier's effect kind; default kindNotify
	config func(*effects.Config)
}

func setup(t *testing.T, o *setupOpts) *bundle {
	t.Helper()
	if o == nil {
		o = &setupOpts{}
	}
	ctx := t.Context()
	b := &bundle{db: pgtest.NewMigrated(t), seen: newAttempts()}
	_, err := effects.MigrateRiver(ctx, b.db.Pool, &effects.RiverMigrateOptions{Schema: b.db.Schema})
	require.NoError(t, err)
	b.idem, b.plain = newRemote(t, true), newRemote(t, false)
	b.fx = newClient(t, b, o.config)
	b.notifier = &notifier{fx: b.fx, kind: kindNotify}
	if o.kind != "" {
		b.notifier.kind = o.kind
	}
	b.proc, err = projection.New(b.db.Pool, &projection.Config{Schema: b.db.Schema, MaxAttempts: 2, RetryBackoff: time.Millisecond}, b.notifier)
	require.NoError(t, err)
	require.NoError(t, b.proc.Setup(ctx))
	return b
}

// testConfig is the effects configuration of the tests: fast retries and
// polls, short claims.
func testConfig(b *bundle) *effects.Config {
	return &effects.Config{
		Schema:            b.db.Schema,
		Timeout:           2 * time.Second,
		RetryBackoff:      20 * time.Millisecond,
		MaxBackoff:        200 * time.Millisecond,
		ReconcileInterval: 100 * time.Millisecond,
		PollInterval:      50 * time.Millisecond,
		OnAttempt:         b.seen.add,
	}
}

// handlers are the test handlers on the bundle's remotes.
func handlers(b *bundle) []effects.Handler {
	return []effects.Handler{
		&httpEffect{kind: kindNotify, url: b.idem.srv.URL},
		&checkedEffect{httpEffect{kind: kindChecked, url: b.plain.srv.URL}},
	}
}

// newClient returns an effects client on the bundle's schema, stopped at
// the end of the test if it was started.
func newClient(t *testing.T, b *bundle, config func(*effects.Config), hs ...effects.Handler) *effects.Client {
	t.Helper()
	cfg := testConfig(b)
	if config != nil {
		config(cfg)
	}
	if hs == nil {
		hs = handlers(b)
	}
	fx, err := effects.New(b.db.Pool, cfg, hs...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, fx.Stop(ctx))
	})
	return fx
}

func (b *bundle) start(t *testing.T) {
	t.Helper()
	require.NoError(t, b.fx.Start(t.Context()))
}

// events returns versions 1…n of aggregate agg.
func events(t *testing.T, agg string, n int) []aggregate.Event {
	t.Helper()
	out := make([]aggregate.Event, n)
	for i := range out {
		e, err := aggregate.New(agg, int64(i+1), "thing.happened", map[string]any{"n": i + 1})
		require.NoError(t, err)
		out[i] = e
	}
	return out
}

// attempts collects Config.OnAttempt's reports and wakes waiters.
type attempts struct {
	mu      sync.Mutex
	all     []effects.Attempt
	changed chan struct{}
}

func newAttempts() *attempts { return &attempts{changed: make(chan struct{})} }

func (a *attempts) add(x effects.Attempt) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.all = append(a.all, x)
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *attempts) of(key string) []effects.Attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []effects.Attempt
	for _, x := range a.all {
		if x.Key == key {
			out = append(out, x)
		}
	}
	return out
}

// wait waits, re-checking on every attempt's report, until cond holds.
func (a *attempts) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		a.mu.Lock()
		ch := a.changed
		a.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			require.FailNow(t, "timed out waiting for "+what)
		}
	}
}

// waitState waits until the intent of key is in state, and an attempt of
// the bundle's client (or its reconciliation pass) reported it (OnAttempt
// comes just after the outcome is recorded).
func (b *bundle) waitState(t *testing.T, key string, state effects.State) effects.Effect {
	t.Helper()
	var e effects.Effect
	b.seen.wait(t, fmt.Sprintf("intent %s to be %s", key, state), func() bool {
		reported := false
		for _, a := range b.seen.of(key) {
			reported = reported || a.State == state
		}
		if !reported {
			return false
		}
		var err error
		e, err = b.fx.Get(t.Context(), key)
		require.NoError(t, err)
		return e.State == state
	})
	return e
}

// waitAllDone waits until no intent is open.
func (b *bundle) waitAllDone(t *testing.T) {
	t.Helper()
	b.seen.wait(t, "every intent to be done", func() bool {
		return b.count(t, `SELECT count(*) FROM effects WHERE state <> 'done'`) == 0
	})
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(t.Context(), sql, args...).Scan(&n))
	return n
}

// jobsOf counts the River jobs of key.
func (b *bundle) jobsOf(t *testing.T, key string) int {
	t.Helper()
	return b.count(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'key' = $2`, effects.JobKind, key)
}

// keyOf is the key the notifier's intent of e has.
func keyOf(kind string, e aggregate.Event) string {
	return effects.Intent{Kind: kind, Event: e}.Key("notifier")
}

// record records intents of the notifier's projection directly, in their
// own transaction.
func (b *bundle) record(t *testing.T, intents ...effects.Intent) []string {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(t.Context(), b.db.Pool, func(tx pgx.Tx) error {
		_, err := b.fx.RecordTx(t.Context(), tx, "notifier", intents...)
		return err
	}))
	keys := make([]string, len(intents))
	for i, in := range intents {
		keys[i] = in.Key("notifier")
	}
	return keys
}

// intent is an intent of kind for version 1 of aggregate agg.
func intent(t *testing.T, kind, agg string) effects.Intent {
	t.Helper()
	return effects.Intent{Kind: kind, Event: events(t, agg, 1)[0], Args: agg}
}

// process delivers events in one batch and requires success.
func (b *bundle) process(t *testing.T, events ...aggregate.Event) []projection.Result {
	t.Helper()
	res, err := b.proc.Process(t.Context(), projection.Batch{Events: events})
	require.NoError(t, err)
	return res
}
