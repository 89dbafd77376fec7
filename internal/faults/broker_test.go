package faults_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inorder/inorder/aggregate"
)

// broker plays the source: an at-least-once queue of batches that it hands
// to worker processes, a few at a time each, and takes back when a worker
// dies before answering (redelivery), or when an answer is "lost" on the
// way (lostAcks of them, at random): the batch is then delivered again
// although it committed. A batch is done once a worker answered it without
// error. Every error a worker reports is kept: the suite requires none.
type broker struct {
	t          *testing.T
	lines      [][]byte // each batch's delivery, encoded
	goroutines int      // per worker: the batches a worker has in flight at most
	url        string
	schema     string
	lostAcks   float64

	mu      sync.Mutex
	rng     *rand.Rand
	queue   []int // batches to deliver
	done    []bool
	nDone   int
	workers []*worker
	nextID  int
	changed chan struct{} // closed and replaced whenever a batch is done or a worker dies
	errs    []string
	st      brokerStats
	// retried tallies the failures the workers' processors logged as
	// retried, by kind (see retryKind).
	retried map[string]int
}

// brokerStats are the figures a run reports.
type brokerStats struct {
	Sent, Redelivered, LostAcks, Answers int
	Outcomes                             map[string]int
	// Retried counts the batches whose Process call took more than one
	// transaction, Attempts the transactions of all calls.
	Retried, Attempts int
	// Slowest are the longest Process calls.
	Slowest []reply
}

// worker is the broker's handle on one worker process.
type worker struct {
	id       int
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	inflight map[int]bool
	killed   bool // by the test: its death is expected
	dead     bool
	exited   chan struct{}
	err      error // cmd.Wait's, set before exited is closed
	stderr   tailBuffer
}

func newBroker(t *testing.T, seed uint64, batches [][]aggregate.Event, goroutines int, url, schema string, lostAcks float64) *broker {
	b := &broker{
		t: t, goroutines: goroutines, url: url, schema: schema, lostAcks: lostAcks,
		rng:     rand.New(rand.NewPCG(seed, 3)),
		done:    make([]bool, len(batches)),
		changed: make(chan struct{}),
		st:      brokerStats{Outcomes: map[string]int{}},
		retried: map[string]int{},
	}
	for i, events := range batches {
		line, err := json.Marshal(delivery{ID: i, Events: events})
		if err != nil {
			t.Fatalf("encode batch %d: %v", i, err)
		}
		b.lines = append(b.lines, append(line, '\n'))
		b.queue = append(b.queue, i)
	}
	t.Cleanup(func() {
		b.mu.Lock()
		ws := slices.Clone(b.workers)
		b.mu.Unlock()
		for _, w := range ws {
			select {
			case <-w.exited:
			default:
				_ = w.cmd.Process.Kill()
				<-w.exited
			}
		}
	})
	return b
}

// signal wakes whoever waits on b.changed; b.mu must be held.
func (b *broker) signal() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// progress returns the number of batches done and a channel closed at the
// next change.
func (b *broker) progress() (int, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.nDone, b.changed
}

// finished reports whether every batch is done.
func (b *broker) finished() bool {
	n, _ := b.progress()
	return n == len(b.lines)
}

// start starts a worker process and gives it work.
func (b *broker) start() *worker {
	b.t.Helper()
	b.mu.Lock()
	id := b.nextID
	b.nextID++
	b.mu.Unlock()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envWorker+"="+strconv.Itoa(id),
		envWorkerURL+"="+b.url,
		envWorkerSchema+"="+b.schema,
		envWorkerGoroutines+"="+strconv.Itoa(b.goroutines),
	)
	w := &worker{id: id, cmd: cmd, inflight: map[int]bool{}, exited: make(chan struct{})}
	w.stderr.line = b.logged
	cmd.Stderr = &w.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.t.Fatalf("worker %d: %v", id, err)
	}
	w.stdin = stdin
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.t.Fatalf("worker %d: %v", id, err)
	}
	if err := cmd.Start(); err != nil {
		b.t.Fatalf("start worker %d: %v", id, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var r reply
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				b.fail(fmt.Sprintf("worker %d: undecodable output %q: %v", id, sc.Text(), err))
				continue
			}
			b.answered(w, r)
		}
		_, _ = io.Copy(io.Discard, stdout)
		w.err = cmd.Wait()
		close(w.exited)
		b.exited(w)
	}()
	b.mu.Lock()
	b.workers = append(b.workers, w)
	b.fill(w)
	b.mu.Unlock()
	return w
}

// fill sends w batches from the queue until it has its share in flight;
// b.mu must be held.
func (b *broker) fill(w *worker) {
	for !w.dead && !w.killed && len(w.inflight) < b.goroutines && len(b.queue) > 0 {
		id := b.queue[0]
		b.queue = b.queue[1:]
		w.inflight[id] = true
		b.st.Sent++
		if _, err := w.stdin.Write(b.lines[id]); err != nil {
			// The worker is dying: exited will requeue what it holds.
			return
		}
	}
}

// requeue puts batch id back at a random place of the queue, as a
// redelivery; b.mu must be held.
func (b *broker) requeue(id int) {
	b.st.Redelivered++
	at := b.rng.IntN(len(b.queue) + 1)
	b.queue = slices.Insert(b.queue, at, id)
}

// fillAll gives work to every live worker; b.mu must be held.
func (b *broker) fillAll() {
	for _, w := range b.workers {
		b.fill(w)
	}
}

func (b *broker) fail(msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errs = append(b.errs, msg)
}

// answered records a worker's reply.
func (b *broker) answered(w *worker, r reply) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(w.inflight, r.ID)
	b.st.Answers++
	b.st.Attempts += r.Attempts
	if r.Attempts > 1 {
		b.st.Retried++
	}
	if len(b.st.Slowest) < 3 || r.Millis > b.st.Slowest[len(b.st.Slowest)-1].Millis {
		slow := r
		slow.Outcomes = nil
		b.st.Slowest = append(b.st.Slowest, slow)
		slices.SortFunc(b.st.Slowest, func(x, y reply) int { return int(y.Millis - x.Millis) })
		b.st.Slowest = b.st.Slowest[:min(3, len(b.st.Slowest))]
	}
	switch {
	case r.Err != "":
		// Every error surfaced to the caller fails the suite; the batch is
		// redelivered, as a source would.
		b.errs = append(b.errs, fmt.Sprintf("worker %d, batch %d, after %d attempts in %d ms: %s", w.id, r.ID, r.Attempts, r.Millis, r.Err))
		b.requeue(r.ID)
	case b.done[r.ID]:
		// A redelivery of a batch already done.
		for o, n := range r.Outcomes {
			b.st.Outcomes[o] += n
		}
	case b.rng.Float64() < b.lostAcks:
		// The acknowledgement is lost: the source delivers it again.
		for o, n := range r.Outcomes {
			b.st.Outcomes[o] += n
		}
		b.st.LostAcks++
		b.requeue(r.ID)
	default:
		for o, n := range r.Outcomes {
			b.st.Outcomes[o] += n
		}
		b.done[r.ID] = true
		b.nDone++
		b.signal()
	}
	b.fillAll()
}

// exited takes back a dead worker's batches.
func (b *broker) exited(w *worker) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w.dead = true
	if !w.killed && len(w.inflight) > 0 {
		b.errs = append(b.errs, fmt.Sprintf("worker %d died with %d batches in flight: %v; stderr:\n%s", w.id, len(w.inflight), w.err, w.stderr.String()))
	}
	for id := range w.inflight {
		b.requeue(id)
	}
	clear(w.inflight)
	b.signal()
	b.fillAll()
}

// busyWorker returns a live worker with batches in flight, at random, or
// nil.
func (b *broker) busyWorker() *worker {
	b.mu.Lock()
	defer b.mu.Unlock()
	var busy []*worker
	for _, w := range b.workers {
		if !w.dead && !w.killed && len(w.inflight) > 0 {
			busy = append(busy, w)
		}
	}
	if len(busy) == 0 {
		return nil
	}
	return busy[b.rng.IntN(len(busy))]
}

// kill sends SIGKILL to w while it works, waits for it to die (its batches
// go back to the queue) and starts a worker in its place.
func (b *broker) kill(w *worker) error {
	b.mu.Lock()
	w.killed = true
	b.mu.Unlock()
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill worker %d: %w", w.id, err)
	}
	<-w.exited
	var exit *exec.ExitError
	if !errors.As(w.err, &exit) {
		return fmt.Errorf("worker %d: exit %v, not killed", w.id, w.err)
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return fmt.Errorf("worker %d: exit %v, not killed", w.id, w.err)
	}
	b.start()
	return nil
}

// stop ends every live worker — stdin closed, so it finishes what it has
// and exits — and requires a clean exit.
func (b *broker) stop(ctx context.Context) error {
	b.mu.Lock()
	var live []*worker
	for _, w := range b.workers {
		if !w.dead && !w.killed {
			live = append(live, w)
		}
	}
	b.mu.Unlock()
	var errs []error
	for _, w := range live {
		_ = w.stdin.Close()
	}
	for _, w := range live {
		select {
		case <-w.exited:
		case <-ctx.Done():
			return fmt.Errorf("worker %d did not exit: %w", w.id, ctx.Err())
		}
		if w.err != nil {
			errs = append(errs, fmt.Errorf("worker %d: %w; stderr:\n%s", w.id, w.err, w.stderr.String()))
		}
	}
	return errors.Join(errs...)
}

// errors returns the errors reported so far.
func (b *broker) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.errs)
}

func (b *broker) stats() brokerStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.st
	st.Slowest = slices.Clone(b.st.Slowest)
	st.Outcomes = map[string]int{}
	for o, n := range b.st.Outcomes {
		st.Outcomes[o] = n
	}
	return st
}

// logged tallies a worker's log line if it reports a retried failure.
func (b *broker) logged(line []byte) {
	var l struct{ Msg, Error string }
	if json.Unmarshal(line, &l) != nil || l.Msg != "transient failure, retrying batch" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.retried[retryKind(l.Error)]++
}

var (
	sqlState = regexp.MustCompile(`\(SQLSTATE (\w+)\)`)
	numbers  = regexp.MustCompile(`[0-9]+`)
)

// retryKind names a retried failure: its message with numbers (addresses,
// ports) blanked, and the SQLSTATE code if it has one.
func retryKind(msg string) string {
	if m := sqlState.FindStringSubmatch(msg); m != nil {
		msg = msg[:strings.Index(msg, m[0])] + m[0]
		if i := strings.LastIndex(msg[:len(msg)-len(m[0])], ": "); i >= 0 {
			msg = msg[i+2:]
		}
		return msg
	}
	msg = numbers.ReplaceAllString(msg, "N")
	msg = strings.TrimPrefix(msg, "projection: ")
	if len(msg) > 140 {
		msg = msg[:140] + "…"
	}
	return msg
}

// retriedKinds returns the tally of retried failures, most frequent first.
func (b *broker) retriedKinds() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for k, n := range b.retried {
		out = append(out, fmt.Sprintf("%5d× %s", n, k))
	}
	slices.Sort(out)
	slices.Reverse(out)
	return out
}

// retriedWith returns how many retried failures contained substr.
func (b *broker) retriedWith(substr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for k, c := range b.retried {
		if strings.Contains(k, substr) {
			n += c
		}
	}
	return n
}

// tailBuffer keeps the last 64 kB written to it, and hands each complete
// line to line, if set.
type tailBuffer struct {
	mu      sync.Mutex
	b       []byte
	partial []byte
	line    func([]byte)
}

const tailSize = 64 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	t.b = append(t.b, p...)
	if len(t.b) > tailSize {
		t.b = append(t.b[:0], t.b[len(t.b)-tailSize:]...)
	}
	var lines [][]byte
	if t.line != nil {
		t.partial = append(t.partial, p...)
		for {
			i := bytes.IndexByte(t.partial, '\n')
			if i < 0 {
				break
			}
			lines = append(lines, t.partial[:i])
			t.partial = t.partial[i+1:]
		}
		t.partial = append([]byte(nil), t.partial...)
	}
	t.mu.Unlock()
	// Outside t.mu: the callback takes the broker's lock, which is held
	// while String is called.
	for _, l := range lines {
		t.line(l)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// waitFor waits until cond holds, re-checking it whenever ch() fires, for
// at most stall between changes; it reports whether cond held.
func waitFor(ctx context.Context, stall time.Duration, cond func() bool, ch func() <-chan struct{}) bool {
	timer := time.NewTimer(stall)
	defer timer.Stop()
	for {
		c := ch()
		if cond() {
			return true
		}
		select {
		case <-c:
			timer.Reset(stall)
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}
