package ledger_test

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/projection/projectiontest"
)

// receiver is a webhook receiver that remembers idempotency keys: it counts
// every delivery, and applies each key once. Its first answer to every
// third key is a 503, so some deliveries are retried.
type receiver struct {
	mu         sync.Mutex
	deliveries map[string]int
	applied    map[string]ledger.Settled
	changed    chan struct{}
}

func newReceiver() *receiver {
	return &receiver{deliveries: map[string]int{}, applied: map[string]ledger.Settled{}, changed: make(chan struct{})}
}

// webhookLedger is the ledger (set-based, or per-event) on db with its
// settlement webhooks to a receiver: effects' river schema migrated, the
// receiver serving, the effects client made (not started) and the
// processor set up.
type webhookLedger struct {
	recv *receiver
	fx   *effects.Client
	proc *projection.Processor
}

func newWebhookLedger(t *testing.T, db *pgtest.DB, perEvent bool) webhookLedger {
	t.Helper()
	ctx := t.Context()
	_, err := effects.MigrateRiver(ctx, db.Pool, &effects.RiverMigrateOptions{Schema: db.Schema})
	require.NoError(t, err)
	recv := newReceiver()
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	fx, err := effects.New(db.Pool, &effects.Config{
		Schema: db.Schema, RetryBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		PollInterval: 50 * time.Millisecond,
	}, &ledger.Webhook{URL: srv.URL})
	require.NoError(t, err)
	var p projection.Projection = ledger.New(&ledger.Options{Effects: fx})
	if perEvent {
		p = ledger.NewSimple(&ledger.Options{Effects: fx})
	}
	proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema}, p)
	require.NoError(t, err)
	require.NoError(t, proc.Setup(ctx))
	return webhookLedger{recv, fx, proc}
}

// start starts the effects client until the test ends.
func (w webhookLedger) start(t *testing.T) {
	t.Helper()
	require.NoError(t, w.fx.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.fx.Stop(context.Background())) })
}

// eachShape runs test, in parallel, for the set-based ledger and for the
// per-event one.
func eachShape(t *testing.T, test func(t *testing.T, perEvent bool)) {
	for _, perEvent := range []bool{false, true} {
		name := map[bool]string{false: "set-based", true: "per-event"}[perEvent]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, perEvent)
		})
	}
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	key := req.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(req.Body)
	if err != nil || key == "" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	s, err := ledger.Decode(body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deliveries[key]++
	close(r.changed)
	r.changed = make(chan struct{})
	if r.deliveries[key] == 1 && key[0]%3 == 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if _, seen := r.applied[key]; !seen {
		r.applied[key] = s
	}
}

// TestSettlementWebhooks runs a shuffled stream with duplicates through the
// ledger (set-based and per-event) from several goroutines and sends its
// settlement webhooks: the receiver is notified of each settled payment,
// with the right amounts, exactly once — retries of the 503s included.
func TestSettlementWebhooks(t *testing.T) {
	t.Parallel()
	eachShape(t, func(t *testing.T, perEvent bool) {
		ctx := t.Context()
		w := newWebhookLedger(t, pgtest.NewMigrated(t), perEvent)
		recv, fx, proc := w.recv, w.fx, w.proc

		rng := rand.New(rand.NewPCG(7, 8))
		events := ledger.Generate(rng, 40, 6)
		deliveries := append([]aggregate.Event{}, events...)
		for range len(events) / 3 {
			deliveries = append(deliveries, events[rng.IntN(len(events))])
		}
		rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
		var work [][]aggregate.Event
		for len(deliveries) > 0 {
			n := min(1+rng.IntN(20), len(deliveries))
			work = append(work, deliveries[:n])
			deliveries = deliveries[n:]
		}
		require.NoError(t, projectiontest.Deliver(ctx, work, 4, func(ctx context.Context, b []aggregate.Event) error {
			_, err := proc.Process(ctx, projection.Batch{Events: b})
			return err
		}))
		want, err := ledger.Settlements(events, "ledger")
		require.NoError(t, err)
		require.NotEmpty(t, want)

		w.start(t)
		deadline := time.After(time.Minute)
		for {
			recv.mu.Lock()
			n, ch := len(recv.applied), recv.changed
			recv.mu.Unlock()
			if n == len(want) {
				break
			}
			select {
			case <-ch:
			case <-deadline:
				require.FailNow(t, "timed out", "%d of %d settlements notified", n, len(want))
			}
		}
		recv.mu.Lock()
		defer recv.mu.Unlock()
		require.Equal(t, want, recv.applied, "each settlement notified, with its payload")
		retried := 0
		for k, n := range recv.deliveries {
			_, ok := want[k]
			require.True(t, ok, "a delivery with an unknown key")
			if k[0]%3 == 0 {
				require.Equal(t, 2, n, "a 503 is retried once, with the same key")
				retried++
			} else {
				require.Equal(t, 1, n)
			}
		}
		require.Positive(t, retried)
		intents, err := fx.List(ctx, projection.ListOptions{Kind: ledger.SettledWebhook, Limit: 1000})
		require.NoError(t, err)
		require.Len(t, intents, len(want), "one intent per settlement")
	})
}

// TestWebhookTraced: a webhook sent in a traced attempt is a client span,
// child of the attempt's, and the receiver gets its traceparent.
func TestWebhookTraced(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Get("traceparent") }))
	t.Cleanup(srv.Close)

	ctx, attempt := tp.Tracer("test").Start(t.Context(), "inorder.effect "+ledger.SettledWebhook)
	w := &ledger.Webhook{URL: srv.URL}
	require.NoError(t, w.Perform(ctx, &effects.Effect{Key: "k-1", Kind: ledger.SettledWebhook, Args: []byte(`{}`)}))
	attempt.End()

	header := <-got
	var post tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.SpanKind == trace.SpanKindClient {
			post = s
		}
	}
	require.Equal(t, "POST "+ledger.SettledWebhook, post.Name)
	require.Equal(t, attempt.SpanContext().SpanID(), post.Parent.SpanID(), "a child of the attempt")
	require.Equal(t, "00-"+post.SpanContext.TraceID().String()+"-"+post.SpanContext.SpanID().String()+"-01", header,
		"the receiver continues the trace")

	// Untraced, it sends no trace context.
	require.NoError(t, w.Perform(t.Context(), &effects.Effect{Key: "k-2", Kind: ledger.SettledWebhook, Args: []byte(`{}`)}))
	require.Empty(t, <-got)
}
