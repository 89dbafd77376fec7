package projection_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/internal/streamtest"
	"github.com/inorder/inorder/internal/syncbuf"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/projection/projectiontest"
)

// The multi-process tests re-execute the test binary, running only
// TestHelperProcess, with these variables naming what the helper does.
const (
	envHelperMode   = "INORDER_HELPER_MODE" // "stream", "same", "crash", "retry" or "contend" ("-owner": Config.Owner)
	envHelperURL    = "INORDER_HELPER_DB_URL"
	envHelperSchema = "INORDER_HELPER_SCHEMA"
	envHelperSeed   = "INORDER_HELPER_SEED"
	envHelperWorker = "INORDER_HELPER_WORKER"

	// helperPrefix marks the helper's protocol lines on its stdout.
	helperPrefix = "inorder-helper: "
	// helperTimeout bounds a helper's run; the parent kills it a little
	// later.
	helperTimeout = 90 * time.Second
)

// Workload sizes of the helpers, shared by parent and children.
const (
	streamProcs, streamGoroutines    = 3, 3
	streamAggregates, streamVersions = 75, 40 // 40 versions: logs fill pages of 16 and move to applied
	sameProcs, sameGoroutines        = 3, 4
	crashAggregates, crashVersions   = 150, 20
	crashKills                       = 4
	retryProcs, retryGoroutines      = 3, 4
)

// streamDeliveries is the stream of a seed and its deliveries: every event
// plus exact copies of a quarter of them, shuffled.
func streamDeliveries(seed uint64, aggregates, versions int) (events, deliveries []aggregate.Event) {
	rng := rand.New(rand.NewPCG(seed, 0x57))
	events = ledger.Generate(rng, aggregates, versions)
	return events, streamtest.WithCopies(rng, events, len(events)/4)
}

// tally is a helper's report of outcomes.
type tally struct {
	Applied, Parked, Duplicate, Other, Drained int64
}

func (a *tally) add(b tally) {
	a.Applied += b.Applied
	a.Parked += b.Parked
	a.Duplicate += b.Duplicate
	a.Other += b.Other
	a.Drained += b.Drained
}

// sumTallies reads the tally each helper reports on its next line of kind,
// and returns their sum.
func sumTallies(t *testing.T, helpers []*helperProc, kind string) tally {
	t.Helper()
	var sum tally
	for _, h := range helpers {
		var c tally
		require.NoError(t, json.Unmarshal([]byte(h.expect(t, kind)), &c))
		sum.add(c)
	}
	return sum
}

// TestProcessesSameStream runs the same shuffled stream with duplicates
// through several processes at once, each with several goroutines: with
// processors of no owner, and with processors that all ask to own the
// inline ledger's gate key (Config.Owner: one does, the others write as
// other writers, and the owner's own goroutines overlap on aggregates).
func TestProcessesSameStream(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"stream", "stream-owner"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testProcessesSameStream(t, mode)
		})
	}
}

func testProcessesSameStream(t *testing.T, mode string) {
	b := setup(t, nil)
	const seed = 11
	events, deliveries := streamDeliveries(seed, streamAggregates, streamVersions)

	helpers := make([]*helperProc, streamProcs)
	for w := range helpers {
		helpers[w] = startHelper(t, mode, b.db, seed, w)
	}
	for _, h := range helpers {
		h.expect(t, "READY")
	}
	began := time.Now()
	for _, h := range helpers {
		h.send(t, "GO")
	}
	sum := sumTallies(t, helpers, "COUNTS")
	for _, h := range helpers {
		h.requireExit(t)
	}
	t.Logf("%d processes × %d goroutines delivered %d deliveries each in %v: %+v",
		streamProcs, streamGoroutines, len(deliveries), time.Since(began).Round(time.Millisecond), sum)

	distinct := int64(len(events))
	require.Equal(t, distinct, sum.Applied+sum.Drained, "every event applied once across processes")
	require.Equal(t, distinct, sum.Applied+sum.Parked, "one first delivery per event across processes")
	require.Equal(t, sum.Parked, sum.Drained)
	require.Equal(t, int64(streamProcs*len(deliveries))-distinct, sum.Duplicate)
	require.Zero(t, sum.Other)
	b.requireFold(t, events)
	projectiontest.RequireSettled(t, b.proc, events)
}

// sameEvents returns the stream of TestProcessesSameEvent — one payment of
// five versions — and the order its rounds deliver them in: versions 1 (no
// version row yet), 2, 3, 5 (parked) and 4 (draining 5).
func sameEvents(seed uint64) (events, rounds []aggregate.Event) {
	events = ledger.Generate(rand.New(rand.NewPCG(seed, 0)), 1, 5)
	return events, []aggregate.Event{events[0], events[1], events[2], events[4], events[3]}
}

// TestProcessesSameEvent is the seed's test across processes: one event
// delivered at once by several goroutines in each of several processes has
// exactly one effect — for version 1, the two legs of one ledger
// transaction.
func TestProcessesSameEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const seed = 12
	events, rounds := sameEvents(seed)

	helpers := make([]*helperProc, sameProcs)
	for w := range helpers {
		helpers[w] = startHelper(t, "same", b.db, seed, w)
	}
	for r, e := range rounds {
		for _, h := range helpers {
			require.Equal(t, strconv.Itoa(r), h.expect(t, "READY"))
		}
		for _, h := range helpers {
			h.send(t, "GO")
		}
		sum := sumTallies(t, helpers, "RESULT")
		want := tally{Applied: 1, Duplicate: sameProcs*sameGoroutines - 1}
		if e.Version == 5 {
			want = tally{Parked: 1, Duplicate: sameProcs*sameGoroutines - 1}
		}
		require.Equal(t, want, sum, "round %d, version %d", r, e.Version)
		if e.Version == 1 {
			var legs int
			require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM ledger_legs`).Scan(&legs))
			require.Equal(t, 2, legs, "exactly the two legs of one transaction")
		}
		if e.Version <= 3 {
			b.requireFold(t, events[:e.Version])
		}
	}
	for _, h := range helpers {
		h.requireExit(t)
	}
	b.requireFold(t, events)
	projectiontest.RequireSettled(t, b.proc, events)
}

// TestProcessCrash kills a worker process with SIGKILL at random points of a
// stream, restarts it from the beginning of its delivery list each time
// (at-least-once redelivery), and lets a last run finish: the read model is
// the fold, nothing is left parked. With crash-owner the worker owns the
// inline ledger's gate key (Config.Owner): each new run takes the lease the
// killed one held, with the versions it parked.
func TestProcessCrash(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"crash", "crash-owner"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testProcessCrash(t, mode)
		})
	}
}

func testProcessCrash(t *testing.T, mode string) {
	b := setup(t, nil)
	const seed = 13
	events, deliveries := streamDeliveries(seed, crashAggregates, crashVersions)
	distinct := int64(len(events))
	rng := rand.New(rand.NewPCG(seed, 1))
	progress := func() int64 {
		var n int64
		// The payments' versions sum to the events applied (the inline
		// ledger keeps no version rows on its fast path).
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT coalesce(sum(version), 0) FROM ledger_payments`).Scan(&n))
		return n
	}

	began := time.Now()
	var last int64
	var kills []int64
	for run := range crashKills {
		h := startHelper(t, mode, b.db, seed, run)
		// Kill points spread over the first two thirds of the stream, each
		// past the previous one: every restart must get further.
		step := distinct / (crashKills + 2)
		target := max(last+1, int64(run+1)*step+rng.Int64N(step)-step/2)
		deadline := time.Now().Add(time.Minute)
		finished := false
		for !finished && progress() < target {
			require.True(t, time.Now().Before(deadline), "run %d: no progress to %d applied events in time", run, target)
			select {
			case <-h.done:
				finished = true
			case <-time.After(5 * time.Millisecond):
			}
		}
		if !finished {
			// A random extra delay puts the kill anywhere in a transaction.
			select {
			case <-h.done:
				finished = true
			case <-time.After(time.Duration(rng.IntN(20)) * time.Millisecond):
			}
		}
		if finished {
			t.Logf("run %d finished before it could be killed", run)
			h.requireExit(t)
			break
		}
		h.kill(t)
		last = progress()
		kills = append(kills, last)
		if mode == "crash-owner" {
			// The killed worker held the lease; its row stays for the next
			// to take over.
			var n int
			require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM owners`).Scan(&n))
			require.Equal(t, 1, n, "run %d: the worker owned no lease", run)
		}
	}
	require.GreaterOrEqual(t, len(kills), crashKills-1, "the worker must be killed mid-stream")
	require.Less(t, kills[0], distinct, "the first kill must come before the end of the stream")

	h := startHelper(t, mode, b.db, seed, crashKills)
	h.expect(t, "DONE")
	h.requireExit(t)
	t.Logf("%d deliveries; killed at %v applied events of %d; redelivered to the end in %v",
		len(deliveries), kills, distinct, time.Since(began).Round(time.Millisecond))
	b.requireFold(t, events)
	projectiontest.RequireSettled(t, b.proc, events)
}

// TestHelperProcess is the body of the helper processes; it does nothing
// unless re-executed by the tests above.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(envHelperMode)
	if mode == "" {
		t.Skip("helper process: runs only when re-executed by the multi-process tests")
	}
	ctx, cancel := context.WithTimeout(context.Background(), helperTimeout)
	defer cancel()
	seed, err := strconv.ParseUint(os.Getenv(envHelperSeed), 10, 64)
	require.NoError(t, err)
	worker, err := strconv.Atoi(os.Getenv(envHelperWorker))
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, os.Getenv(envHelperURL))
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, pool.Ping(ctx))
	cfg, p := &projection.Config{}, projection.Projection(ledger.New(nil))
	deadlocks := &deadlockCounter{}
	switch mode {
	case "retry":
		cfg, p = opConfig(), retryFixedLedger() // the parent's faulty ledger, fixed
	case "contend", "contend-tallied":
		cfg.Logger, cfg.RetryBackoff = slog.New(deadlocks), 5*time.Millisecond
	case "stream-owner", "crash-owner":
		cfg.Owner = true
	}
	cfg.Schema = os.Getenv(envHelperSchema)
	projs := []projection.Projection{p}
	if mode == "contend-tallied" {
		projs = append(projs, typeTally{})
	}
	proc, err := projection.New(pool, cfg, projs...)
	require.NoError(t, err)
	defer func() { require.NoError(t, proc.Close(context.Background())) }() // a killed helper never gets here

	h := &helper{proc: proc, seed: seed, worker: worker, in: bufio.NewReader(os.Stdin)}
	switch mode {
	case "stream", "stream-owner":
		err = h.stream(ctx)
	case "same":
		err = h.same(ctx)
	case "crash", "crash-owner":
		err = h.crash(ctx)
	case "retry":
		err = h.retry(ctx)
	case "contend", "contend-tallied":
		err = h.contend(ctx, deadlocks)
	default:
		err = fmt.Errorf("unknown helper mode %q", mode)
	}
	require.NoError(t, err)
}

// helper is the child side of the multi-process tests.
type helper struct {
	proc   *projection.Processor
	seed   uint64
	worker int
	in     *bufio.Reader
}

func (h *helper) say(kind string, payload any) {
	var s string
	switch p := payload.(type) {
	case string:
		s = p
	default:
		b, err := json.Marshal(p)
		if err != nil {
			panic(err)
		}
		s = string(b)
	}
	fmt.Printf("%s%s %s\n", helperPrefix, kind, s)
}

// await reads the parent's next line, which must be want.
func (h *helper) await(want string) error {
	line, err := h.in.ReadString('\n')
	if err != nil {
		return fmt.Errorf("read from parent: %w", err)
	}
	if got := strings.TrimSpace(line); got != want {
		return fmt.Errorf("parent said %q, want %q", got, want)
	}
	return nil
}

// stream delivers the seed's whole delivery list, in this worker's own
// batches, from several goroutines, once the parent says GO.
func (h *helper) stream(ctx context.Context) error {
	_, deliveries := streamDeliveries(h.seed, streamAggregates, streamVersions)
	work := streamtest.Batches(rand.New(rand.NewPCG(h.seed, uint64(h.worker)+100)), deliveries, 200)
	h.say("READY", "")
	if err := h.await("GO"); err != nil {
		return err
	}
	if err := h.deliver(ctx, work, streamGoroutines); err != nil {
		return err
	}
	c := h.proc.Counts()["ledger"]
	h.say("COUNTS", tally{
		Applied:   c.Deliveries[projection.Applied],
		Parked:    c.Deliveries[projection.Parked],
		Duplicate: c.Deliveries[projection.Duplicate],
		Other:     c.Deliveries[projection.Conflict] + c.Deliveries[projection.Quarantined] + c.Deliveries[projection.Rejected],
		Drained:   c.Drained,
	})
	return nil
}

// same delivers one event per round from several goroutines at once, the
// rounds paced by the parent.
func (h *helper) same(ctx context.Context) error {
	_, rounds := sameEvents(h.seed)
	for r, e := range rounds {
		h.say("READY", strconv.Itoa(r))
		if err := h.await("GO"); err != nil {
			return err
		}
		counts, err := streamtest.AtOnce(ctx, h.proc, e, sameGoroutines)
		if err != nil {
			return err
		}
		var c tally
		for o, n := range counts {
			switch o {
			case projection.Applied:
				c.Applied += int64(n)
			case projection.Parked:
				c.Parked += int64(n)
			case projection.Duplicate:
				c.Duplicate += int64(n)
			default:
				c.Other += int64(n)
			}
		}
		h.say("RESULT", c)
	}
	return nil
}

// crash delivers the seed's delivery list from its beginning, in batches
// that are the same in every run, from two goroutines; the parent kills it
// at some point.
func (h *helper) crash(ctx context.Context) error {
	_, deliveries := streamDeliveries(h.seed, crashAggregates, crashVersions)
	work := streamtest.Batches(rand.New(rand.NewPCG(h.seed, 2)), deliveries, 100)
	if err := h.deliver(ctx, work, 2); err != nil {
		return err
	}
	h.say("DONE", "")
	return nil
}

// deliver processes work from goroutines pulling from one channel.
func (h *helper) deliver(ctx context.Context, work [][]aggregate.Event, goroutines int) error {
	return projectiontest.Deliver(ctx, work, goroutines, func(ctx context.Context, b []aggregate.Event) error {
		_, err := h.proc.Process(ctx, projection.Batch{Events: b})
		return err
	})
}

// helperProc is the parent's handle on a helper process. The process is
// always reaped: by requireExit or kill, or at the latest by the test's
// cleanup, which kills it if it is still running.
type helperProc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	msgs   chan string    // protocol lines, prefix stripped
	stop   chan struct{}  // closed by cleanup: stop forwarding msgs
	done   chan struct{}  // closed once cmd.Wait returned
	err    error          // cmd.Wait's error, set before done is closed
	output syncbuf.Buffer // stdout and stderr, for failure reports
}

// startHelper starts a helper process in mode for db's schema.
func startHelper(t *testing.T, mode string, db *pgtest.DB, seed uint64, worker int) *helperProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), helperTimeout+15*time.Second)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1",
		"-test.timeout="+(helperTimeout+5*time.Second).String())
	cmd.Env = append(os.Environ(),
		envHelperMode+"="+mode,
		envHelperURL+"="+db.URL,
		envHelperSchema+"="+db.Schema,
		envHelperSeed+"="+strconv.FormatUint(seed, 10),
		envHelperWorker+"="+strconv.Itoa(worker),
	)
	cmd.WaitDelay = 5 * time.Second
	h := &helperProc{
		name: fmt.Sprintf("%s helper %d", mode, worker),
		cmd:  cmd,
		msgs: make(chan string, 64),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	cmd.Stderr = &h.output
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	h.stdin = stdin
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	if err := cmd.Start(); err != nil {
		cancel()
		require.NoError(t, err)
	}
	go func() {
		defer cancel()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			h.output.Write([]byte(line + "\n"))
			if msg, ok := strings.CutPrefix(line, helperPrefix); ok {
				select {
				case h.msgs <- msg:
				case <-h.stop:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		h.err = cmd.Wait()
		close(h.done)
	}()
	t.Cleanup(func() {
		close(h.stop)
		select {
		case <-h.done:
		default:
			_ = cmd.Process.Kill()
			<-h.done
		}
		if t.Failed() {
			t.Logf("%s (exit: %v) output:\n%s", h.name, h.err, h.output.String())
		}
	})
	return h
}

// expect waits for the helper's next protocol line, which must be of kind,
// and returns its payload.
func (h *helperProc) expect(t *testing.T, kind string) string {
	t.Helper()
	timeout := time.After(helperTimeout)
	var msg string
	select {
	case msg = <-h.msgs:
	case <-h.done:
		select {
		case msg = <-h.msgs:
		default:
			require.FailNow(t, h.name+" exited", "waiting for %s: exit %v; output:\n%s", kind, h.err, h.output.String())
		}
	case <-timeout:
		require.FailNow(t, h.name+" timed out", "waiting for %s", kind)
	}
	got, payload, _ := strings.Cut(msg, " ")
	require.Equal(t, kind, got, "%s said %q", h.name, msg)
	return payload
}

// send writes a line to the helper's stdin.
func (h *helperProc) send(t *testing.T, line string) {
	t.Helper()
	_, err := io.WriteString(h.stdin, line+"\n")
	require.NoError(t, err, "%s: write %q", h.name, line)
}

// requireExit waits for the helper to exit and requires success.
func (h *helperProc) requireExit(t *testing.T) {
	t.Helper()
	select {
	case <-h.done:
	case <-time.After(helperTimeout):
		require.FailNow(t, h.name+" did not exit")
	}
	require.NoError(t, h.err, "%s output:\n%s", h.name, h.output.String())
}

// kill sends SIGKILL to the helper, reaps it and requires that it died of
// the signal (not that it had finished first).
func (h *helperProc) kill(t *testing.T) {
	t.Helper()
	select {
	case <-h.done:
		require.FailNow(t, h.name+" exited before it was killed", "exit %v; output:\n%s", h.err, h.output.String())
	default:
	}
	require.NoError(t, h.cmd.Process.Signal(syscall.SIGKILL))
	<-h.done
	var exit *exec.ExitError
	require.ErrorAs(t, h.err, &exit)
	ws, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled(), "%s: %v", h.name, h.err)
	require.Equal(t, syscall.SIGKILL, ws.Signal())
}
