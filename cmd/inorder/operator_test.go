package main_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb/esdbtest"
)

// This file holds issue 25's workflows with the shipped binary: what an
// operator does with a bad event, a repair from a shell that lacks the
// workers' flags, a schema of another binary.

// TestBadEventWorkflow: a binary event (v2 of payment-z1) is one rejected
// row whichever path delivers it — the worker, a repair, a replay —; a
// repair from a shell without the worker's --stream-prefix reads the
// stream the workers read and says why it applied nothing; the replay is
// refused for the content type, as the worker's delivery was; declaring
// version 2 missing resolves the row, and the pending count (status and
// /metrics) says so. parked show prints payloads as text.
func TestBadEventWorkflow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.run(t, "migrate")
	appendEvent := func(ev esdbtest.Event) {
		t.Helper()
		_, err := e.esdb.Append(streamPrefix+"z1", ev)
		require.NoError(t, err)
	}
	appendEvent(esdbtest.Event{Type: ledger.Authorized, Data: []byte(`{"payer":"ann","payee":"bob","amount":500}`)})
	appendEvent(esdbtest.Event{Type: ledger.Captured, ContentType: "application/octet-stream", Data: []byte{0xde, 0xad, 0xbe, 0xef}})
	appendEvent(esdbtest.Event{Type: ledger.Refunded, Data: []byte(`{"amount":100}`)})

	run := e.start(t, "run", "--http-addr", "127.0.0.1:0")
	run.baseURL(t)
	var st projection.Status
	deadline := time.Now().Add(time.Minute)
	for {
		e.runJSON(t, &st, "status")
		if st.Rejected.Total == 1 && st.Projections[0].Parked == 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the worker did not reject v2 and park v3: %+v", st)
		time.Sleep(50 * time.Millisecond)
	}
	run.stop(t)

	// The operator's shell has neither the worker's --stream-prefix nor its
	// variable: the repair reads the stream the workers read.
	delete(e.vars, "INORDER_STREAM_PREFIX")
	out, errOut, err := e.exec(t, "parked", "repair", "z1")
	require.NoError(t, err, "found, not missing at the source: %s%s", out, errOut)
	require.Contains(t, errOut, `reading the streams as the workers of source esdb do: --stream-prefix "payment-"`)
	require.Regexp(t, `(?m)^z1\s+2-2\s+1\s+1 rejected \(see 'rejected list'\)\s+-\s+nothing\s*$`, out, "it says why nothing applied")
	var log []projection.OperatorLogEntry
	e.runJSON(t, &log, "oplog", "--action", "gap-missing-at-source")
	require.Empty(t, log, "no gap recorded missing for a stream that exists")

	var rs []projection.RejectedEntry
	e.runJSON(t, &rs, "rejected", "list")
	require.Len(t, rs, 1, "one row for the worker's delivery and the repair's")
	require.EqualValues(t, 2, rs[0].Count)
	require.Equal(t, "application/octet-stream", rs[0].ContentType)
	id := strconv.FormatInt(rs[0].ID, 10)

	out = e.run(t, "parked", "show", "z1")
	require.Regexp(t, `(?m)^ledger\s+1\s+1\s+3\s+\S+\s+payment.refunded\s+.*\s\{"amount":100\}\s*$`, out, "the payload as text")

	_, errOut, err = e.exec(t, "rejected", "replay", id)
	require.Equal(t, 1, exitCode(t, err))
	require.Contains(t, errOut, "content type application/octet-stream is not JSON", "judged as delivered")
	e.runJSON(t, &rs, "rejected", "list")
	require.Len(t, rs, 1, "the replay is the same row")
	require.EqualValues(t, 2, rs[0].Count, "and not a delivery")
	require.Contains(t, rs[0].Error, "content type application/octet-stream is not JSON")

	out = e.run(t, "parked", "declare-gap", "z1", "--to", "2", "--reason", "binary event from a broken producer", "--dry-run")
	require.Contains(t, out, "dry run, nothing changed: declare-gap: ledger generation 1 z1")
	require.Contains(t, out, "rejected deliveries resolved: ["+id+"]")
	e.runJSON(t, &st, "status")
	require.Equal(t, projection.RejectedCounts{Total: 1, Pending: 1}, st.Rejected)
	out = e.run(t, "parked", "declare-gap", "z1", "--to", "2", "--reason", "binary event from a broken producer")
	require.Contains(t, out, "version 1 -> 3")
	require.Contains(t, out, "rejected deliveries resolved: ["+id+"]")
	e.runJSON(t, &st, "status")
	require.Equal(t, projection.RejectedCounts{Total: 1, Pending: 0}, st.Rejected)
	require.Zero(t, st.Projections[0].Parked)

	serve := e.start(t, "serve", "--http-addr", "127.0.0.1:0")
	resp := getBody(t, serve.baseURL(t)+"/metrics")
	require.Regexp(t, `(?m)^inorder_rejected_pending 0$`, resp)
	serve.stop(t)
}

// TestStatusOtherSchema: a schema that holds only another binary's
// projection says so instead of showing the ledger empty.
func TestStatusOtherSchema(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.run(t, "migrate")
	proc, err := projection.New(e.db.Pool, &projection.Config{Schema: e.db.Schema}, orders{})
	require.NoError(t, err)
	ev, err := aggregate.New("o-1", 1, "order.placed", map[string]int{"total": 3})
	require.NoError(t, err)
	_, err = proc.Process(t.Context(), projection.Batch{Events: []aggregate.Event{ev}})
	require.NoError(t, err)
	out := e.run(t, "status")
	require.Regexp(t, regexp.MustCompile(`(?m)^note: schema \S+ holds no state of ledger; it holds orders, which this binary does not have`), out)
}

// orders is another binary's projection: it records nothing.
type orders struct{}

func (orders) Name() string { return "orders" }
func (orders) Apply(context.Context, *projection.Tx, aggregate.Event) error {
	return nil
}

// getBody GETs url and returns the body.
func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	return string(b)
}
