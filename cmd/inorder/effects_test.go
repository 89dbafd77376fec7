package main_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/httpapi"
	"github.com/inorder/inorder/source/esdb/esdbtest"
)

// settlementReceiver is a webhook receiver that remembers idempotency keys:
// it accepts each key once (a repeat would be counted) and refuses the first
// delivery of every key starting with "0"–"3" with a 503.
type settlementReceiver struct {
	mu       sync.Mutex
	accepted map[string]int
	refused  map[string]bool
	changed  chan struct{}
}

func (r *settlementReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	key := req.Header.Get("Idempotency-Key")
	if _, err := ledger.Decode(body); err != nil || key == "" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func() {
		close(r.changed)
		r.changed = make(chan struct{})
	}()
	if strings.IndexByte("0123", key[0]) >= 0 && !r.refused[key] {
		r.refused[key] = true
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	r.accepted[key]++
}

// TestRunWithEffects runs the shipped binary with its settlement webhooks
// enabled (INORDER_LEDGER_WEBHOOK_URL): run applies the stream and performs
// the webhooks, the receiver gets each settlement once (the 503s retried
// with the same key), /metrics and /v1/status show the effects, and SIGTERM
// drains.
func TestRunWithEffects(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	recv := &settlementReceiver{accepted: map[string]int{}, refused: map[string]bool{}, changed: make(chan struct{})}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)
	e.vars["INORDER_LEDGER_WEBHOOK_URL"] = srv.URL
	out := e.run(t, "migrate")
	require.Contains(t, out, "River's migrations")

	events := ledger.Generate(rand.New(rand.NewPCG(5, 5)), 60, 6)
	for i := range events {
		id := uuid.New()
		_, err := e.esdb.Append(streamPrefix+events[i].Aggregate, esdbtest.Event{ID: id, Type: events[i].Type, Data: events[i].Data})
		require.NoError(t, err)
		events[i].ID = id.String() // as the source delivers it: the key is derived from it
	}
	want, err := ledger.Settlements(events, "ledger")
	require.NoError(t, err)
	require.NotEmpty(t, want)

	run := e.start(t, "run", "--workers", "2", "--batch-size", "20", "--max-wait", "5ms", "--http-addr", "127.0.0.1:0", "--effects-workers", "4")
	base := run.baseURL(t)
	deadline := time.After(2 * time.Minute)
	for {
		recv.mu.Lock()
		n, ch := len(recv.accepted), recv.changed
		recv.mu.Unlock()
		if n == len(want) {
			break
		}
		select {
		case <-ch:
		case <-run.done:
			t.Fatalf("run exited: %v", run.err)
		case <-deadline:
			t.Fatalf("%d of %d settlements notified", n, len(want))
		}
	}
	e.waitApplied(t, int64(len(events)), time.Minute)

	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(metrics), `inorder_effects_intents{kind="`+ledger.SettledWebhook+`",state="failed"} 0`)
	require.Contains(t, string(metrics), `inorder_effects_attempts_total{kind="`+ledger.SettledWebhook+`",outcome="done"}`)
	var st httpapi.StatusResponse
	getJSON(t, base+"/v1/status", &st)
	require.Len(t, st.Effects, 1)
	require.Equal(t, ledger.SettledWebhook, st.Effects[0].Kind)
	require.Zero(t, st.Effects[0].Failed)

	run.stop(t)
	require.Contains(t, run.stderr.String(), "effects workers started")

	recv.mu.Lock()
	defer recv.mu.Unlock()
	refused := 0
	for k := range want {
		require.Equal(t, 1, recv.accepted[k], "settlement %s notified once", k)
		if recv.refused[k] {
			refused++
		}
	}
	require.Len(t, recv.accepted, len(want), "nothing else notified")
	require.Positive(t, refused, "some first deliveries were refused and retried")
	var failed []effects.Effect
	e.runJSON(t, &failed, "effects", "list", "--state", "failed")
	require.Empty(t, failed)
	var done []effects.Effect
	e.runJSON(t, &done, "effects", "list", "--state", "done", "--limit", fmt.Sprint(len(want)+10))
	require.Len(t, done, len(want))
}
