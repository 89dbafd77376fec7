package main_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb/esdbtest"
	"github.com/inorder/inorder/source/pgtable"
)

// lastVersion returns the aggregate of the last event and its highest
// version.
func lastVersion(events []aggregate.Event) (string, int64) {
	agg := events[len(events)-1].Aggregate
	var v int64
	for _, e := range events {
		if e.Aggregate == agg {
			v = max(v, e.Version)
		}
	}
	return agg, v
}

// TestRun runs the workers of the built binary in catch-up mode: HTTP reads
// with min_version, the operator commands, SIGTERM mid-run, a restart, and
// a read model equal to the fold.
func TestRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := e.run(t, "migrate")
	require.Contains(t, out, "applied 001_init")

	w1 := e.workload(t, 1, 0, 300, 6)
	// Noise: an event whose content is not JSON (rejected) and a stream
	// outside the prefix (skipped).
	_, err := e.esdb.Append(streamPrefix+"junk-1", esdbtest.Event{Type: "payment.authorized", ContentType: "application/octet-stream", Data: []byte{0xff, 0x00}})
	require.NoError(t, err)
	_, err = e.esdb.Append("audit-1", esdbtest.Event{Type: "audit.logged", Data: []byte(`{}`)})
	require.NoError(t, err)

	args := []string{"run", "--workers", "4", "--batch-size", "10", "--max-wait", "5ms", "--http-addr", "127.0.0.1:0", "--http-max-wait", "30s", "--log-format", "json"}
	run := e.start(t, args...)
	base := run.baseURL(t)

	t.Run("ReadYourWrites", func(t *testing.T) {
		agg, v := lastVersion(w1)
		var body struct {
			Aggregate string `json:"aggregate"`
			Version   int64  `json:"version"`
			Data      struct {
				Status string `json:"status"`
			} `json:"data"`
		}
		resp := getJSON(t, fmt.Sprintf("%s/v1/projections/ledger/aggregates/%s?min_version=%d", base, agg, v), &body)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, strconv.FormatInt(v, 10), resp.Header.Get("Inorder-Version"))
		require.Equal(t, agg, body.Aggregate)
		require.Equal(t, v, body.Version)
		require.NotEmpty(t, body.Data.Status)

		var fail struct {
			Error struct {
				Code           string `json:"code"`
				CurrentVersion int64  `json:"current_version"`
			} `json:"error"`
		}
		resp = getJSON(t, fmt.Sprintf("%s/v1/projections/ledger/aggregates/%s?min_version=%d&timeout=50ms", base, agg, v+1), &fail)
		require.Equal(t, http.StatusGatewayTimeout, resp.StatusCode)
		require.Equal(t, "timeout", fail.Error.Code)
		require.Equal(t, v, fail.Error.CurrentVersion)

		resp = getJSON(t, base+"/v1/projections/nope/aggregates/x", &fail)
		require.Equal(t, http.StatusNotFound, resp.StatusCode)
		require.Equal(t, "unknown_projection", fail.Error.Code)

		resp = getJSON(t, base+"/readyz", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
	})

	e.waitApplied(t, int64(len(w1)), time.Minute)

	t.Run("Metrics", func(t *testing.T) {
		resp, err := http.Get(base + "/metrics")
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Regexp(t, `(?m)^inorder_events_total\{outcome="applied",projection="ledger"\} \d+`, string(body))
		require.Regexp(t, `(?m)^inorder_source_received_total\{source="esdb"\} \d+`, string(body))
		require.Contains(t, string(body), "inorder_batch_duration_seconds_bucket")
	})

	t.Run("OperatorCommands", func(t *testing.T) {
		var st projection.Status
		e.runJSON(t, &st, "status")
		require.Len(t, st.Projections, 1)
		require.Equal(t, "ledger", st.Projections[0].Name)
		require.Equal(t, int64(len(w1)), st.Projections[0].Events)
		require.Equal(t, int64(300), st.Projections[0].Aggregates)
		require.Zero(t, st.Projections[0].Parked)
		require.Equal(t, int64(1), st.Rejected.Pending)
		require.Len(t, st.Checkpoints, 1)
		require.Equal(t, "esdb", st.Checkpoints[0].Name)

		out := e.run(t, "status")
		require.Regexp(t, `(?m)^ledger\s+300\s+`+strconv.Itoa(len(w1))+`\s+0\s+0\s+-\s+0\s+0\s*$`, out)
		require.Contains(t, out, "rejected deliveries: 1 (1 pending: ")
		require.Regexp(t, `(?m)^esdb\s+C:\d{20}/P:\d{20}\s+`, out)

		var rej []projection.RejectedEntry
		e.runJSON(t, &rej, "rejected", "list")
		require.Len(t, rej, 1)
		require.Equal(t, "junk-1", rej[0].Aggregate)
		require.Equal(t, "invalid_json", rej[0].Reason)
		require.Equal(t, "esdb", rej[0].Source)
		out = e.run(t, "rejected", "list")
		require.Regexp(t, `(?m)^\d+\s+junk-1\s+1\s+payment.authorized\s+invalid_json\s`, out)

		var none []json.RawMessage
		for _, cmd := range [][]string{{"parked", "list"}, {"quarantine", "list"}, {"conflicts", "list"}} {
			e.runJSON(t, &none, cmd...)
			require.Empty(t, none, cmd)
			out := e.run(t, cmd...)
			require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 1, "only the header: %s", out)
		}
	})

	// More events; SIGTERM while they are being applied: the workers drain
	// and exit 0, and a restart applies the rest. Nothing lost.
	w2 := e.workload(t, 2, 1000, 500, 6)
	total := int64(len(w1) + len(w2))
	deadline := time.Now().Add(time.Minute)
	for e.applied(t) == int64(len(w1)) {
		require.True(t, time.Now().Before(deadline), "the second workload never started")
		time.Sleep(5 * time.Millisecond)
	}
	run.signal(t, syscall.SIGTERM)
	require.NoError(t, run.wait(t, time.Minute), "a drained stop exits 0")
	require.Contains(t, run.stderr.String(), "draining")
	require.Contains(t, run.stderr.String(), "workers stopped")
	stopped := e.applied(t)
	t.Logf("SIGTERM after %d of %d events", stopped, total)

	run = e.start(t, args...)
	e.waitApplied(t, total, time.Minute)
	run.signal(t, syscall.SIGINT)
	require.NoError(t, run.wait(t, time.Minute))
	e.requireFold(t, slices.Concat(w1, w2))
	require.Zero(t, e.count(t, `SELECT count(*) FROM parked`))
}

// TestPersistentSideBySide runs two worker processes as competing consumers
// of one persistent subscription, and the read API alone with serve.
func TestPersistentSideBySide(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.workload(t, 3, 0, 400, 5)
	args := []string{"run", "--mode", "persistent", "--group", "e2e", "--workers", "2", "--batch-size", "20",
		"--buffer-size", "16", "--http-addr", "", "--migrate"}
	a := e.start(t, args...)
	b := e.start(t, args...)
	e.waitApplied(t, int64(len(w)), time.Minute)
	b.stop(t)
	// Two signals: the second cuts the drain short (or comes after it).
	a.signal(t, syscall.SIGTERM)
	a.signal(t, syscall.SIGTERM)
	if err := a.wait(t, time.Minute); err != nil {
		require.Contains(t, a.stderr.String(), "drain aborted", "the only acceptable failure")
	}
	e.requireFold(t, w)
	for _, p := range []*process{a, b} {
		require.Contains(t, p.stderr.String(), "subscribed to persistent group", "both consumed")
	}
	// The in-process server reports 23.10.0, without the fix of
	// KurrentDB#5497: --consumer-strategy auto creates a RoundRobin group.
	require.Contains(t, a.stderr.String()+b.stderr.String(), "strategy=RoundRobin")
	_, errOut, err := e.exec(t, "run", "--mode", "persistent", "--group", "e2e", "--consumer-strategy", "Sticky")
	require.Equal(t, 2, exitCode(t, err), errOut)
	require.Contains(t, errOut, "--consumer-strategy must be one of auto, RoundRobin, DispatchToSingle, Pinned")

	serve := e.start(t, "serve", "--http-addr", "127.0.0.1:0", "--http-token", "s3cret")
	base := serve.baseURL(t)
	req, err := http.NewRequest(http.MethodGet, base+"/v1/projections/ledger/aggregates?limit=2&status=captured", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	var page struct {
		Items []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"items"`
		Next string `json:"next"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, page.Items, 2)
	require.Equal(t, "captured", page.Items[0].Status)
	require.NotEmpty(t, page.Next)
	resp = getJSON(t, base+"/healthz", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "health checks need no token")

	serve.signal(t, syscall.SIGTERM)
	require.NoError(t, serve.wait(t, 30*time.Second))
}

// TestRebuild rebuilds the ledger in place while a worker runs, then kills a
// rebuild half-way with SIGKILL and reruns it.
func TestRebuild(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.run(t, "migrate")
	w1 := e.workload(t, 4, 0, 500, 6)
	run := e.start(t, "run", "--http-addr", "", "--batch-size", "100")
	e.waitApplied(t, int64(len(w1)), time.Minute)

	// Damage the read model: a rebuild repairs it.
	_, err := e.db.Pool.Exec(t.Context(), `UPDATE ledger_balances SET balance = balance + 1`)
	require.NoError(t, err)

	var rep cli.RebuildReport
	e.runJSON(t, &rep, "rebuild", "ledger", "--in-place", "--batch-size", "200", "--yes")
	require.Equal(t, int64(len(w1)), rep.Events)
	require.Equal(t, "ledger", rep.Projection)
	e.requireFold(t, w1)

	// The live worker resumes after the rebuild.
	w2 := e.workload(t, 5, 1000, 100, 6)
	e.waitApplied(t, int64(len(w1)+len(w2)), time.Minute)
	run.stop(t)
	all := slices.Concat(w1, w2)
	e.requireFold(t, all)

	// Kill a slow rebuild once it has replayed part of the stream.
	kill := e.start(t, "rebuild", "ledger", "--in-place", "--batch-size", "5", "--workers", "1", "--yes")
	deadline := time.Now().Add(time.Minute)
	for e.count(t, `SELECT count(*) FROM operator_log WHERE action = 'rebuild-start'`) < 2 || e.applied(t) < 100 {
		require.True(t, time.Now().Before(deadline), "the rebuild never started")
		time.Sleep(5 * time.Millisecond)
	}
	kill.signal(t, syscall.SIGKILL)
	require.Error(t, kill.wait(t, 30*time.Second))
	partial := e.applied(t)
	require.Less(t, partial, int64(len(all)), "killed half-way")
	require.Equal(t, int64(1), e.count(t, `SELECT count(*) FROM operator_log WHERE action = 'rebuild-done'`))

	out := e.run(t, "rebuild", "ledger", "--in-place", "-y")
	require.Regexp(t, `rebuilt ledger: `+strconv.Itoa(len(all))+` events replayed`, out)
	e.requireFold(t, all)
	require.Equal(t, int64(2), e.count(t, `SELECT count(*) FROM operator_log WHERE action = 'rebuild-done'`))
}

// TestDemo runs the README's demo command on a small workload.
func TestDemo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out, errOut, err := e.exec(t, "demo", "--payments", "300", "--versions", "6", "--exit",
		"--database-url", e.db.URL, "--schema", e.db.Schema)
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out, errOut)
	require.Contains(t, out, "verified: read model equals the in-order fold")
	require.Regexp(t, `(?m)^events:\s+1800 \(300 payments x 6 versions\)`, out)
	require.Regexp(t, `(?m)^applied:\s+1800 `, out)
	require.Regexp(t, `(?m)^duplicates:\s+[1-9]\d*`, out, "redeliveries happened")
	e.vars["INORDER_SCHEMA"] = e.db.Schema
	var st projection.Status
	e.runJSON(t, &st, "status")
	require.Equal(t, int64(1800), st.Projections[0].Events)

	// A schema the demo did not create, with tables in it, is not dropped.
	out, errOut, err = e.exec(t, "demo", "--payments", "10", "--exit", "--database-url", e.db.URL, "--schema", e.db.Schema)
	require.NoError(t, err, "the demo's own schema is dropped and recreated: %s", errOut)
	_, err = e.db.Pool.Exec(t.Context(), `COMMENT ON SCHEMA `+quote(e.db.Schema)+` IS 'mine'`)
	require.NoError(t, err)
	_, errOut, err = e.exec(t, "demo", "--payments", "10", "--exit", "--database-url", e.db.URL, "--schema", e.db.Schema)
	require.Error(t, err)
	require.Contains(t, errOut, "refusing to drop it")
	require.Contains(t, out, "verified")
	require.Equal(t, int64(80), e.count(t, `SELECT sum(version) FROM ledger_payments`), "the refused run changed nothing")
}

func quote(ident string) string { return `"` + strings.ReplaceAll(ident, `"`, `""`) + `"` }

// TestRunEventsTable runs the workers on inorder's own events table in the
// schema (--source postgres: the database of --database-url): appended
// events reach the read model and the HTTP API, the source's lag is
// exported under the names every source uses, a rebuild replays the table,
// and the drain exits cleanly.
func TestRunEventsTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.run(t, "migrate")
	w := pgtable.NewWriter(e.db.Schema, nil)
	appendAll := func(events []aggregate.Event) {
		for len(events) > 0 {
			n := min(len(events), 100)
			require.NoError(t, w.Append(t.Context(), e.db.Pool, events[:n]...))
			events = events[n:]
		}
	}
	w1 := ledger.Generate(rand.New(rand.NewPCG(7, 7)), 200, 5)
	appendAll(w1)
	// --http-max-wait as in TestRun: the min_version read below waits for
	// 100 payments appended at once, over 5 s (the default) on a loaded CI
	// machine (504 once).
	run := e.start(t, "run", "--source", "postgres", "--workers", "2", "--batch-size", "50", "--http-addr", "127.0.0.1:0", "--http-max-wait", "30s")
	base := run.baseURL(t)
	e.waitApplied(t, int64(len(w1)), time.Minute)

	w2 := ledger.Generate(rand.New(rand.NewPCG(8, 8)), 100, 5)
	for i := range w2 {
		w2[i].Aggregate = "live-" + w2[i].Aggregate
	}
	appendAll(w2)
	agg, v := lastVersion(w2)
	var body struct {
		Version int64 `json:"version"`
	}
	resp := getJSON(t, fmt.Sprintf("%s/v1/projections/ledger/aggregates/%s?min_version=%d", base, agg, v), &body)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, v, body.Version)
	e.waitApplied(t, int64(len(w1)+len(w2)), time.Minute)

	metrics, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	text, err := io.ReadAll(metrics.Body)
	metrics.Body.Close()
	require.NoError(t, err)
	require.Regexp(t, `(?m)^inorder_source_partitions_held\{source="postgres"\} 16$`, string(text))
	require.Regexp(t, `(?m)^inorder_source_batches_total\{reason="\w+",source="postgres"\} \d+`, string(text))

	_, err = e.db.Pool.Exec(t.Context(), `UPDATE ledger_balances SET balance = balance + 1`)
	require.NoError(t, err)
	var rep cli.RebuildReport
	e.runJSON(t, &rep, "rebuild", "ledger", "--in-place", "--source", "postgres", "--yes")
	all := slices.Concat(w1, w2)
	require.Equal(t, int64(len(all)), rep.Events)
	e.requireFold(t, all)

	run.stop(t)
	e.requireFold(t, all)
	cps := e.count(t, `SELECT count(*) FROM checkpoints WHERE name LIKE 'postgres/%'`)
	require.Equal(t, int64(16), cps, "a checkpoint per partition")
}
