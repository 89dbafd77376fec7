package metrics_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/metrics"
	"github.com/inorder/inorder/projection"
)

// scrape fetches h's exposition over HTTP and parses it: one entry per
// sample, keyed by the sample's name and labels as printed.
func scrape(t *testing.T, h http.Handler) map[string]float64 {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		require.Positive(t, i, "line %q", line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, "line %q", line)
		out[line[:i]] = v
	}
	require.NoError(t, sc.Err())
	return out
}

// event is a ledger event.
var event = ledgertest.Event

func TestMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewMigrated(t)
	var m *metrics.Metrics
	cfg := &projection.Config{
		Schema:       db.Schema,
		RetryBackoff: time.Millisecond,
		OnBatch:      func(b projection.BatchInfo) { m.ObserveBatch(b) },
	}
	proc, err := projection.New(db.Pool, cfg, ledger.New(nil))
	require.NoError(t, err)
	require.NoError(t, proc.Setup(ctx))
	m = metrics.New(proc, nil)
	cached := metrics.New(proc, &metrics.Options{CacheTTL: time.Hour, NoRuntime: true})
	live := metrics.New(proc, &metrics.Options{CacheTTL: -1, NoRuntime: true})
	// Fill the cache before the workload.
	require.Equal(t, 0.0, scrape(t, cached.Handler())[`inorder_parked_events{projection="ledger"}`])

	a := []aggregate.Event{
		event(t, "pay-a", 1, ledger.Authorized, ledger.Data{Payer: "p", Payee: "q", Amount: 100}),
		event(t, "pay-a", 2, ledger.Approved, ledger.Data{}),
		event(t, "pay-a", 3, ledger.Captured, ledger.Data{Amount: 40}),
	}
	b1 := event(t, "pay-b", 1, ledger.Authorized, ledger.Data{Payer: "p", Payee: "q", Amount: 50})
	b2 := event(t, "pay-b", 2, ledger.Approved, ledger.Data{})
	b3 := event(t, "pay-b", 3, ledger.Voided, ledger.Data{})
	const (
		A = projection.Applied
		P = projection.Parked
		D = projection.Duplicate
		C = projection.Conflict
		Q = projection.Quarantined
		R = projection.Rejected
	)
	batches := []struct {
		events []aggregate.Event
		want   []projection.Outcome
	}{
		{a, []projection.Outcome{A, A, A}},
		{[]aggregate.Event{b3, b2}, []projection.Outcome{P, P}},
		{[]aggregate.Event{b1}, []projection.Outcome{A}}, // drains 2
		{[]aggregate.Event{a[1]}, []projection.Outcome{D}},
		{[]aggregate.Event{event(t, "pay-a", 2, ledger.Captured, ledger.Data{Amount: 5})}, []projection.Outcome{C}},
		{[]aggregate.Event{{Aggregate: "", Version: 1, Type: ledger.Approved, Data: []byte(`{}`)}}, []projection.Outcome{R}},
		// A payment must start authorized: the handler fails three times,
		// then the event is quarantined (two retries).
		{[]aggregate.Event{event(t, "pay-c", 1, ledger.Captured, ledger.Data{Amount: 5})}, []projection.Outcome{Q}},
		{[]aggregate.Event{event(t, "pay-c", 2, ledger.Approved, ledger.Data{})}, []projection.Outcome{P}},
	}
	events := 0
	for i, bt := range batches {
		b := projection.Batch{Events: bt.events}
		if i == 0 {
			b.BeforeCommit = func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO checkpoints (name, position, updated_at)
VALUES ('esdb:$all', '\x07', now() - interval '5 seconds')`)
				return err
			}
		}
		res, err := proc.Process(ctx, b)
		require.NoError(t, err)
		got := make([]projection.Outcome, len(res))
		for k, r := range res {
			got[k] = r.Outcome
		}
		require.Equal(t, bt.want, got, "batch %d", i)
		events += len(bt.events)
	}
	// One batch fails: its context is already cancelled.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = proc.Process(cancelled, projection.Batch{Events: a[:1]})
	require.Error(t, err)
	events++

	got := scrape(t, m.Handler())
	want := map[string]float64{
		`inorder_events_total{outcome="applied",projection="ledger"}`:     4,
		`inorder_events_total{outcome="parked",projection="ledger"}`:      3,
		`inorder_events_total{outcome="duplicate",projection="ledger"}`:   1,
		`inorder_events_total{outcome="conflict",projection="ledger"}`:    1,
		`inorder_events_total{outcome="quarantined",projection="ledger"}`: 1,
		`inorder_events_total{outcome="rejected",projection="ledger"}`:    1,
		`inorder_drained_total{projection="ledger"}`:                      2,
		`inorder_batches_total{projection="ledger"}`:                      8,
		`inorder_deadlocks_total{projection="ledger"}`:                    0,
		`inorder_stale_memory_total{projection="ledger"}`:                 0, // one processor: its memory is right

		`inorder_batch_duration_seconds_count{projection="ledger",result="ok"}`:    8,
		`inorder_batch_duration_seconds_count{projection="ledger",result="error"}`: 1,
		`inorder_batch_events_count{projection="ledger"}`:                          9,
		`inorder_batch_events_sum{projection="ledger"}`:                            float64(events),
		`inorder_batch_retries_total{projection="ledger"}`:                         2,

		`inorder_parked_events{projection="ledger"}`:      1, // pay-c v2, behind the quarantine
		`inorder_parked_aggregates{projection="ledger"}`:  1,
		`inorder_quarantined_events{projection="ledger"}`: 1,
		`inorder_open_conflicts{projection="ledger"}`:     1,
		`inorder_rejected_pending`:                        1,
		`inorder_status_up`:                               1,
	}
	for k, v := range want {
		require.Contains(t, got, k)
		require.Equal(t, v, got[k], k)
	}
	require.Greater(t, got[`inorder_batch_duration_seconds_sum{projection="ledger",result="ok"}`], 0.0)
	require.Equal(t, 8.0, got[`inorder_batch_duration_seconds_bucket{projection="ledger",result="ok",le="+Inf"}`])
	age := got[`inorder_parked_oldest_age_seconds{projection="ledger"}`]
	require.GreaterOrEqual(t, age, 0.0)
	require.Less(t, age, 60.0)
	cpAge := got[`inorder_checkpoint_age_seconds{source="esdb:$all"}`]
	require.GreaterOrEqual(t, cpAge, 5.0)
	require.Less(t, cpAge, 65.0)
	require.Contains(t, got, "go_goroutines")

	t.Run("CachedGauges", func(t *testing.T) {
		// Not parallel: it reads the state the workload left.
		stale := scrape(t, cached.Handler())
		require.Equal(t, 0.0, stale[`inorder_parked_events{projection="ledger"}`])
		require.Equal(t, 0.0, stale[`inorder_quarantined_events{projection="ledger"}`])
		// Counters are never cached.
		require.Equal(t, 4.0, stale[`inorder_events_total{outcome="applied",projection="ledger"}`])
		require.NotContains(t, stale, "go_goroutines")

		fresh := scrape(t, live.Handler())
		require.Equal(t, 1.0, fresh[`inorder_parked_events{projection="ledger"}`])
		require.Equal(t, 1.0, fresh[`inorder_quarantined_events{projection="ledger"}`])
		_, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{event(t, "pay-d", 2, ledger.Approved, ledger.Data{})}})
		require.NoError(t, err)
		fresh = scrape(t, live.Handler())
		require.Equal(t, 2.0, fresh[`inorder_parked_events{projection="ledger"}`])
		require.Equal(t, 2.0, fresh[`inorder_parked_aggregates{projection="ledger"}`])
	})

	t.Run("DatabaseDown", func(t *testing.T) {
		pool, err := pgxpool.New(ctx, db.URL)
		require.NoError(t, err)
		pool.Close()
		closed, err := projection.New(pool, &projection.Config{Schema: db.Schema}, ledger.New(nil))
		require.NoError(t, err)
		down := scrape(t, metrics.New(proc, &metrics.Options{NoRuntime: true, Gauges: closed}).Handler())
		require.Equal(t, 0.0, down["inorder_status_up"])
		require.NotContains(t, down, `inorder_parked_events{projection="ledger"}`)
		require.Equal(t, 4.0, down[`inorder_events_total{outcome="applied",projection="ledger"}`])
	})

	t.Run("HTTPAndBuild", func(t *testing.T) {
		m := metrics.New(proc, &metrics.Options{NoRuntime: true, Build: metrics.Build{Version: "v1.2.3", Revision: "abc", GoVersion: "go1.26"}})
		m.ObserveHTTP("GET /v1/things/{id}", http.StatusTeapot, time.Millisecond)
		m.ObserveHTTP("GET /v1/things/{id}", http.StatusTeapot, time.Millisecond)
		m.ObserveHTTP("", http.StatusNotFound, time.Millisecond)
		got := scrape(t, m.Handler())
		require.Equal(t, 2.0, got[`inorder_http_request_duration_seconds_count{code="418",route="GET /v1/things/{id}"}`])
		require.Equal(t, 1.0, got[`inorder_http_request_duration_seconds_count{code="404",route="unmatched"}`])
		require.Equal(t, 1.0, got[`inorder_build_info{goversion="go1.26",revision="abc",version="v1.2.3"}`])
	})

	t.Run("NilObserveBatch", func(t *testing.T) {
		var none *metrics.Metrics
		require.NotPanics(t, func() { none.ObserveBatch(projection.BatchInfo{Events: 1}) })
	})
}
