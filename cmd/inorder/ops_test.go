package main_test

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb/esdbtest"
)

// exitCode returns the exit status of a finished command's error.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	return ee.ExitCode()
}

// requireJSONLines requires every line of out to be one JSON object.
func requireJSONLines(t *testing.T, what, out string) {
	t.Helper()
	require.NotEmpty(t, strings.TrimSpace(out), what)
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		var obj map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &obj), "%s: a line that is not a JSON object: %q", what, line)
		require.NotEmpty(t, obj["msg"], "%s: %q", what, line)
		require.False(t, strings.HasPrefix(obj["msg"].(string), "inorder:"), "no repeated prefix: %q", line)
	}
}

// TestReadiness: /readyz fails while the schema is missing and passes once
// it is migrated; /healthz is liveness only; healthcheck exits accordingly.
func TestReadiness(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.vars["INORDER_SCHEMA"] = e.db.Schema + "_new"
	serve := e.start(t, "serve", "--http-addr", "127.0.0.1:0")
	base := serve.baseURL(t)
	addr := strings.TrimPrefix(base, "http://")

	var fail struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	resp := getJSON(t, base+"/readyz", &fail)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "unavailable", fail.Error.Code)
	require.Contains(t, fail.Error.Message, `schema "`+e.db.Schema+`_new" does not exist`)
	resp = getJSON(t, base+"/healthz", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, "alive all the same")

	out, errOut, err := e.exec(t, "healthcheck", "--http-addr", addr)
	require.Equal(t, 1, exitCode(t, err), "not ready: %s%s", out, errOut)
	require.Contains(t, errOut, "503 Service Unavailable")
	require.Contains(t, errOut, "does not exist")
	_, _, err = e.exec(t, "healthcheck", "--http-addr", addr, "--live")
	require.NoError(t, err)

	e.run(t, "migrate")
	resp = getJSON(t, base+"/readyz", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	out = e.run(t, "healthcheck", "--http-addr", addr)
	require.Contains(t, out, "/readyz: ok")

	// An unreachable server: not ready either.
	_, _, err = e.exec(t, "healthcheck", "--http-addr", "127.0.0.1:1", "--timeout", "2s")
	require.Equal(t, 1, exitCode(t, err))

	serve.signal(t, syscall.SIGTERM)
	require.NoError(t, serve.wait(t, 30*time.Second))
}

// TestExitCodes: 0 ok, 1 failure, 2 usage (validated before connecting),
// 3 incomplete; errors carry the program's name once.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out := e.run(t, "version")
	require.Regexp(t, `^inorder \S+ \(.*go1\.`, out)
	out = e.run(t, "--version")
	require.Regexp(t, `^inorder \S+ \(`, out)
	out = e.run(t, "completion", "bash")
	require.Contains(t, out, "bash completion")
	out = e.run(t, "help", "status")
	require.Contains(t, out, "Usage:\n  inorder status [flags]")

	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status", "--bogus"}, 2, "inorder status: unknown flag: --bogus"},
		{[]string{"frobnicate"}, 2, `inorder: unknown command "frobnicate" (see 'inorder --help')`},
		{[]string{}, 2, "inorder: missing command"},
		// Validation comes before connecting: the database is unreachable.
		{[]string{"run", "--type-regex", "(", "--database-url", "postgres://127.0.0.1:1/x"}, 2, "invalid --type-regex"},
		{[]string{"rebuild", "ledger", "--in-place"}, 2, "pass --yes to confirm"},
		{[]string{"rebuild", "drop", "ledger", "--generation", "2"}, 2, "pass --yes to confirm"},
		{[]string{"status", "--database-url", "postgres://127.0.0.1:1/x?connect_timeout=2"}, 1, "inorder: error: database 127.0.0.1:1:"},
		{[]string{"status", "--schema", e.db.Schema + "_missing"}, 1, `schema "` + e.db.Schema + `_missing" does not exist: run 'inorder migrate --schema ` + e.db.Schema + `_missing' first`},
	} {
		_, errOut, err := e.exec(t, tt.args...)
		require.Equal(t, tt.code, exitCode(t, err), "inorder %v: %s", tt.args, errOut)
		require.Contains(t, errOut, tt.want, tt.args)
		require.NotContains(t, errOut, "inorder: inorder", "no doubled prefix")
		require.NotContains(t, errOut, "--migrate", "only run has --migrate")
	}

	// A command line that names no command still logs as it asks.
	for _, args := range [][]string{{"bogus", "--log-format", "json"}, {"--log-format=json", "parked", "bogus"}} {
		_, errOut, err := e.exec(t, args...)
		require.Equal(t, 2, exitCode(t, err), "%v: %s", args, errOut)
		requireJSONLines(t, "an unknown command's error", errOut)
		require.Contains(t, errOut, `unknown command \"bogus\"`, "the command is what is wrong, not the flag")
	}

	// 3: parked repair finds versions missing at the source.
	e.run(t, "migrate")
	e.process(t, event(t, "pay-9", 1, ledger.Authorized, ledger.Data{Payer: "a", Payee: "b", Amount: 5}),
		event(t, "pay-9", 3, ledger.Voided, ledger.Data{}))
	_, err := e.esdb.Append(streamPrefix+"pay-9", esdbtest.Event{Type: ledger.Authorized, Data: []byte(`{"payer":"a","payee":"b","amount":5}`)})
	require.NoError(t, err)
	out, errOut, err := e.exec(t, "parked", "repair")
	require.Equal(t, 3, exitCode(t, err), "%s%s", out, errOut)
	require.Regexp(t, `(?m)^pay-9\s+2-2\s+0\s+-\s+\[2\]\s+nothing\s*$`, out)
	require.Contains(t, errOut, "wait for versions missing at the source")
}

// TestJSONLogs: with --log-format json every line on stdout and stderr is
// one JSON object, "serving", progress and errors included.
func TestJSONLogs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.vars["INORDER_LOG_FORMAT"] = "json"
	e.run(t, "migrate")
	w := e.workload(t, 7, 0, 50, 4)
	run := e.start(t, "run", "--http-addr", "127.0.0.1:0", "--batch-size", "10")
	run.baseURL(t)
	e.waitApplied(t, int64(len(w)), time.Minute)
	run.stop(t)
	requireJSONLines(t, "run stderr", run.stderr.String())
	require.Empty(t, run.stdout.String())
	require.Regexp(t, `"msg":"serving http://127\.0\.0\.1:\d+"`, run.stderr.String())

	_, errOut, err := e.exec(t, "rebuild", "ledger", "--yes", "--log-level", "info")
	require.NoError(t, err)
	requireJSONLines(t, "rebuild stderr", errOut)
	require.Contains(t, errOut, `"msg":"progress"`)
	// The switch's progress comes before the note that says it is done.
	sw, live := strings.Index(errOut, `generation 2: switch"`), strings.Index(errOut, `"msg":"generation 2 is live"`)
	require.True(t, sw >= 0 && live > sw, "the switch phase is shown before its outcome:\n%s", errOut)
	_, errOut, err = e.exec(t, "rebuild", "ledger", "--in-place", "--yes", "--log-level", "info")
	require.NoError(t, err)
	requireJSONLines(t, "rebuild --in-place stderr", errOut)
	require.Contains(t, errOut, `"msg":"rebuild done"`)

	_, errOut, err = e.exec(t, "status", "--schema", "nope")
	require.Equal(t, 1, exitCode(t, err))
	requireJSONLines(t, "a failing command's stderr", errOut)
	require.Contains(t, errOut, `"exit_code":1`)
	_, errOut, err = e.exec(t, "status", "--bogus")
	require.Equal(t, 2, exitCode(t, err))
	requireJSONLines(t, "a usage error", errOut)
}

// TestOplogAndConflictsAck: a conflict is listed, acknowledged, leaves the
// open count, and the decision is in the operator log.
func TestOplogAndConflictsAck(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.run(t, "migrate")
	e.process(t, event(t, "pay-1", 1, ledger.Authorized, ledger.Data{Payer: "a", Payee: "b", Amount: 5}))
	e.process(t, event(t, "pay-1", 1, ledger.Authorized, ledger.Data{Payer: "mallory", Payee: "b", Amount: 5}))

	var cs []projection.ConflictEntry
	e.runJSON(t, &cs, "conflicts", "list", "--open")
	require.Len(t, cs, 1)
	id := strconv.FormatInt(cs[0].ID, 10)
	var st projection.Status
	e.runJSON(t, &st, "status")
	require.Equal(t, int64(1), st.Projections[0].Conflicts)

	out := e.run(t, "conflicts", "ack", id, "--reason", "producer fixed")
	require.Equal(t, "ack-conflict: ledger generation 1 pay-1 #"+id+": conflict "+id+" acknowledged\n", out)
	e.runJSON(t, &st, "status")
	require.Equal(t, int64(0), st.Projections[0].Conflicts)
	e.runJSON(t, &cs, "conflicts", "list", "--open")
	require.Empty(t, cs)

	var log []projection.OperatorLogEntry
	e.runJSON(t, &log, "oplog")
	require.Len(t, log, 1)
	require.Equal(t, "ack-conflict", log[0].Action)
	require.Equal(t, "producer fixed", log[0].Reason)
	out = e.run(t, "oplog", "--aggregate", "pay-1")
	require.Regexp(t, regexp.MustCompile(`(?m)^\d+\s+\S+\s+ack-conflict\s+ledger\s+1\s+pay-1\s+1\s+producer fixed\s+\S+@\S+$`), out)
}

// process feeds events to the ledger of the env's schema.
func (e *env) process(t *testing.T, events ...aggregate.Event) {
	t.Helper()
	proc, err := projection.New(e.db.Pool, &projection.Config{Schema: e.db.Schema}, ledger.New(nil))
	require.NoError(t, err)
	_, err = proc.Process(t.Context(), projection.Batch{Events: events, Source: "test"})
	require.NoError(t, err)
}

// event is a ledger event.
var event = ledgertest.Event

// TestReadyMaxLag: with --ready-max-lag, /readyz fails while the workers
// cannot commit (the lag grows past it) and passes again once they have.
func TestReadyMaxLag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, errOut, err := e.exec(t, "run", "--ready-max-lag", "-1s")
	require.Equal(t, 2, exitCode(t, err), errOut)
	require.Contains(t, errOut, "--ready-max-lag must not be negative")

	e.run(t, "migrate")
	w := e.workload(t, 21, 0, 20, 3)
	run := e.start(t, "run", "--http-addr", "127.0.0.1:0", "--ready-max-lag", "300ms")
	base := run.baseURL(t)
	e.waitApplied(t, int64(len(w)), time.Minute)
	waitReady := func(want int, contains string) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			var body struct {
				Status string `json:"status"`
				Error  struct{ Message string }
			}
			resp := getJSON(t, base+"/readyz", &body)
			if resp.StatusCode == want && strings.Contains(body.Status+body.Error.Message, contains) {
				return
			}
			require.True(t, time.Now().Before(deadline), "/readyz: %d %q, want %d %q", resp.StatusCode, body.Status+body.Error.Message, want, contains)
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitReady(http.StatusOK, "ready")

	// Hold the version rows: new events cannot commit, their age grows.
	tx, err := e.db.Pool.Begin(t.Context())
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), `LOCK TABLE versions IN EXCLUSIVE MODE`)
	require.NoError(t, err)
	more := e.workload(t, 22, 1000, 5, 2)
	waitReady(http.StatusServiceUnavailable, "exceeds --ready-max-lag 300ms")
	require.NoError(t, tx.Rollback(t.Context()))
	e.waitApplied(t, int64(len(w)+len(more)), time.Minute)
	waitReady(http.StatusOK, "ready")

	run.stop(t)
}

// TestDeclaredGap follows the runbook's gap path with the shipped ledger:
// version 2 of a payment will never come; declared missing, the ledger is
// told (projection.Description.Gap) and the versions parked behind it apply
// instead of being quarantined.
func TestDeclaredGap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.run(t, "migrate")
	e.process(t, event(t, "pay-7", 1, ledger.Authorized, ledger.Data{Payer: "c", Payee: "m", Amount: 100}),
		event(t, "pay-7", 3, ledger.Approved, ledger.Data{}), event(t, "pay-7", 4, ledger.Captured, ledger.Data{Amount: 60}))
	out := e.run(t, "parked", "list")
	require.Regexp(t, `(?m)^ledger\s+1\s+pay-7\s+1\s+2\s+2\s+3-4\s`, out)

	var act map[string]any
	e.runJSON(t, &act, "parked", "declare-gap", "pay-7", "--to", "2", "--projection", "ledger", "--reason", "deleted at the source")
	require.Equal(t, "declare-gap", act["action"])
	require.EqualValues(t, 1, act["before"])
	require.EqualValues(t, 4, act["after"], "the parked versions 3 and 4 applied")

	var st projection.Status
	e.runJSON(t, &st, "status")
	require.Zero(t, st.Projections[0].Parked, "nothing parked")
	require.Zero(t, st.Projections[0].Quarantined, "nothing quarantined")
	m, err := ledger.New(nil).Load(t.Context(), e.db.Pool)
	require.NoError(t, err)
	require.Equal(t, ledger.Payment{ID: "pay-7", Payer: "c", Payee: "m", Status: "captured", Authorized: 100, Captured: 60, Version: 4},
		m.Payments["pay-7"])

	var log []projection.OperatorLogEntry
	e.runJSON(t, &log, "oplog")
	require.Len(t, log, 1)
	require.Equal(t, "declare-gap", log[0].Action)
	require.Equal(t, "deleted at the source", log[0].Reason)
}
