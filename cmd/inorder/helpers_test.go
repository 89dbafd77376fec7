package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/build"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inorder/inorder/internal/syncbuf"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/source/esdb/esdbtest"
)

// binary is the inorder binary built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "inorder-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "inorder")
	// -trimpath: the packages TestRollingUpgrade's build of the previous
	// release (in another directory) shares with this one come from the
	// build cache.
	build := exec.Command(goTool(), "build", "-trimpath", "-o", binary, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(build.Default.GOROOT, "bin", "go")
}

// env is the environment of a test's subprocesses: the test's database and
// schema, its EventStoreDB, and the stream prefix of its workload.
type env struct {
	db   *pgtest.DB
	esdb *esdbtest.Server
	vars map[string]string
}

const streamPrefix = "payment-"

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{db: pgtest.New(t), esdb: esdbtest.New(t)}
	// The schemas of the projections' later generations (rebuild), before
	// pgtest drops the test's.
	t.Cleanup(func() { e.db.DropGenerationSchemas(t) })
	e.vars = map[string]string{
		"DATABASE_URL":          e.db.URL,
		"INORDER_SCHEMA":        e.db.Schema,
		"ESDB_URL":              e.esdb.URL(),
		"INORDER_STREAM_PREFIX": streamPrefix,
		"INORDER_LOG_LEVEL":     "info",
	}
	return e
}

// environ returns the process environment without inorder's variables, plus
// the env's.
func (e *env) environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DATABASE_URL" || k == "ESDB_URL" || strings.HasPrefix(k, "INORDER_") {
			continue
		}
		out = append(out, kv)
	}
	for k, v := range e.vars {
		out = append(out, k+"="+v)
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer = syncbuf.Buffer

// process is a running inorder subprocess.
type process struct {
	cmd    *exec.Cmd
	stdout syncBuffer
	stderr syncBuffer
	done   chan struct{}
	err    error
}

// start starts inorder with args; the test kills it at the end if it is
// still running.
func (e *env) start(t *testing.T, args ...string) *process {
	t.Helper()
	return e.startWith(t, binary, args...)
}

// startWith is start with the binary at path bin (TestRollingUpgrade's
// previous release). It takes the path as an argument: swapping the
// package's binary variable would race with the parallel tests.
func (e *env) startWith(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	p := &process{done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = e.environ()
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	require.NoError(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("inorder %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

// wait waits for the process to exit and returns its error (nil for exit
// status 0).
func (p *process) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		t.Fatalf("inorder %v did not exit within %s\nstderr:\n%s", p.cmd.Args[1:], timeout, p.stderr.String())
		return nil
	}
}

// stop stops the process with SIGTERM and requires a clean exit within a
// minute.
func (p *process) stop(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGTERM)
	require.NoError(t, p.wait(t, time.Minute))
}

// signal sends sig to the process.
func (p *process) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
}

// waitOutput waits until stderr (or stdout) matches re and returns the
// submatches.
func (p *process) waitOutput(t *testing.T, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, s := range []string{p.stderr.String(), p.stdout.String()} {
			if m := re.FindStringSubmatch(s); m != nil {
				return m
			}
		}
		select {
		case <-p.done:
			t.Fatalf("inorder %v exited (%v) before printing %s\nstderr:\n%s", p.cmd.Args[1:], p.err, re, p.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("inorder %v did not print %s within %s\nstderr:\n%s", p.cmd.Args[1:], re, timeout, p.stderr.String())
		}
	}
}

var servingRE = regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+)`)

// baseURL waits for the process's HTTP server and returns its URL.
func (p *process) baseURL(t *testing.T) string {
	t.Helper()
	return p.waitOutput(t, servingRE, 30*time.Second)[1]
}

// run runs inorder to completion and returns stdout; it fails the test on a
// non-zero exit.
func (e *env) run(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := e.exec(t, args...)
	require.NoError(t, err, "inorder %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), out, errOut)
	return out
}

// exec runs inorder to completion.
func (e *env) exec(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = e.environ()
	var o, eb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &eb
	err = cmd.Run()
	return o.String(), eb.String(), err
}

// runJSON runs inorder with --json and decodes stdout into v.
func (e *env) runJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := e.run(t, append(args, "--json")...)
	require.NoError(t, json.Unmarshal([]byte(out), v), "stdout: %s", out)
}

// runServe is a worker (run) and a serve process, with their base URLs.
type runServe struct {
	run, serve         *process
	runBase, serveBase string
}

// runAndServe migrates, appends a workload (see workload), starts a worker
// (run, batches of 10) and, once it applied the workload, a serve process,
// both with an HTTP address of their own.
func (e *env) runAndServe(t *testing.T, seed uint64, offset, payments, versions int) runServe {
	t.Helper()
	e.run(t, "migrate")
	w := e.workload(t, seed, offset, payments, versions)
	rs := runServe{run: e.start(t, "run", "--http-addr", "127.0.0.1:0", "--batch-size", "10")}
	rs.runBase = rs.run.baseURL(t)
	e.waitApplied(t, int64(len(w)), time.Minute)
	rs.serve = e.start(t, "serve", "--http-addr", "127.0.0.1:0")
	rs.serveBase = rs.serve.baseURL(t)
	return rs
}

// stop stops both (SIGTERM) and requires a clean exit of each.
func (rs runServe) stop(t *testing.T) {
	t.Helper()
	rs.run.stop(t)
	rs.serve.stop(t)
}

// workload generates payments and appends them to the env's EventStoreDB,
// each payment to stream "payment-<id>". It returns the events.
func (e *env) workload(t *testing.T, seed uint64, offset, payments, versions int) []aggregate.Event {
	t.Helper()
	events := ledger.Generate(rand.New(rand.NewPCG(seed, seed)), payments, versions)
	for i := range events {
		// Distinct ids per workload: pay-000001 → pay-<offset+1>.
		var n int
		_, err := fmt.Sscanf(events[i].Aggregate, "pay-%d", &n)
		require.NoError(t, err)
		events[i].Aggregate = fmt.Sprintf("pay-%06d", offset+n)
		_, err = e.esdb.Append(streamPrefix+events[i].Aggregate, esdbtest.Event{
			ID: uuid.New(), Type: events[i].Type, Data: events[i].Data,
		})
		require.NoError(t, err)
	}
	return events
}

// applied returns the sum of the ledger's payments' versions: the events
// applied (the inline ledger's fast path writes no version rows).
func (e *env) applied(t *testing.T) int64 {
	t.Helper()
	var n int64
	err := e.db.Pool.QueryRow(t.Context(), `SELECT coalesce(sum(version), 0)::bigint FROM ledger_payments`).Scan(&n)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return 0 // not migrated yet
	}
	require.NoError(t, err)
	return n
}

// waitApplied waits until the ledger has applied n events.
func (e *env) waitApplied(t *testing.T, n int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := e.applied(t)
		if got == n {
			return
		}
		require.Less(t, got, n+1, "more events applied than appended")
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events applied after %s", got, n, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requireFold requires the read model to equal the in-order fold of events.
func (e *env) requireFold(t *testing.T, events []aggregate.Event) {
	t.Helper()
	want, err := ledger.Fold(events)
	require.NoError(t, err)
	got, err := ledger.New(nil).Load(t.Context(), e.db.Pool)
	require.NoError(t, err)
	require.Equal(t, want, got, "the read model equals the in-order fold")
}

// getJSON GETs url and decodes the JSON body into v; it returns the
// response (body consumed).
func getJSON(t *testing.T, url string, v any) *http.Response {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	if v != nil {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
	}
	return resp
}

// count runs a count query in the env's schema.
func (e *env) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), sql, args...).Scan(&n))
	return n
}
