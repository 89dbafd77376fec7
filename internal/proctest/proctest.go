package proctest

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/inorder/inorder/internal/syncbuf"
)

// EnvRole names the variable that makes the test binary run a role instead
// of its tests.
const EnvRole = "INORDER_PROCTEST_ROLE"

// prefix starts every protocol line a child writes on stdout.
const prefix = "proctest: "

// DefaultTimeout bounds each wait of a Proc (Expect, Next, Wait) unless
// Options.Timeout says otherwise.
const DefaultTimeout = 90 * time.Second

// Role is the body of a child process. ctx is cancelled at the first SIGINT
// or SIGTERM; returning nil exits with status 0.
type Role func(ctx context.Context, c *Child) error

// Main runs the role named by EnvRole when the test binary was started by
// Start, and exits with its status; otherwise it runs the tests
// (m.Run) and exits. Call it from TestMain.
func Main(m *testing.M, roles map[string]Role) {
	name := os.Getenv(EnvRole)
	if name == "" {
		os.Exit(m.Run())
	}
	role, ok := roles[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "proctest: unknown role %q (have %s)\n", name, strings.Join(slices.Sorted(maps.Keys(roles)), ", "))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := &Child{in: bufio.NewReader(os.Stdin), out: os.Stdout}
	if err := role(ctx, c); err != nil {
		fmt.Fprintf(os.Stderr, "proctest: role %s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Child is a role's side of the conversation with its test.
type Child struct {
	mu  sync.Mutex
	in  *bufio.Reader
	out io.Writer
}

// Say writes the protocol line "KIND payload" (payload's values separated by
// spaces, fmt.Sprint style) for the test's Expect or Next. It is safe for
// concurrent use.
func (c *Child) Say(kind string, payload ...any) {
	line := kind
	if len(payload) > 0 {
		line += " " + strings.TrimSuffix(fmt.Sprintln(payload...), "\n")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(c.out, "%s%s\n", prefix, line)
}

// Await reads the test's next line (Proc.Send) and returns it; an error when
// stdin ended or the line is not want (when want is not empty).
func (c *Child) Await(want string) (string, error) {
	line, err := c.in.ReadString('\n')
	line = strings.TrimSuffix(line, "\n")
	if err != nil {
		return line, fmt.Errorf("proctest: awaiting %q: %w", want, err)
	}
	if want != "" && line != want {
		return line, fmt.Errorf("proctest: awaited %q, got %q", want, line)
	}
	return line, nil
}

// Getenv returns a variable of the child's environment (Options.Env).
func (c *Child) Getenv(key string) string { return os.Getenv(key) }

// Options configures Start.
type Options struct {
	// Name names the child in failure reports. Default the role's name.
	Name string
	// Env adds variables to the child's environment (the test's own are
	// inherited).
	Env map[string]string
	// Timeout bounds each wait on the child. Default DefaultTimeout.
	Timeout time.Duration
}

// Msg is one protocol line of a child.
type Msg struct {
	Kind, Payload string
}

// Proc is a running child process.
type Proc struct {
	name    string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	msgs    chan Msg
	stop    chan struct{}
	done    chan struct{} // closed once the child exited and its output is read
	err     error         // cmd.Wait's error, set before done is closed
	output  syncBuffer    // stdout and stderr, for failure reports
	timeout time.Duration
}

// Start starts the test binary as a child running role, and stops it (SIGKILL)
// when the test ends if it still runs. The child's output is logged when the
// test fails.
func Start(t testing.TB, role string, opts Options) *Proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("proctest: %v", err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), EnvRole+"="+role)
	for _, k := range slices.Sorted(maps.Keys(opts.Env)) {
		cmd.Env = append(cmd.Env, k+"="+opts.Env[k])
	}
	p := &Proc{
		name: cmp.Or(opts.Name, role), cmd: cmd, timeout: cmp.Or(opts.Timeout, DefaultTimeout),
		msgs: make(chan Msg), stop: make(chan struct{}), done: make(chan struct{}),
	}
	cmd.Stderr = &p.output
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatalf("proctest: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("proctest: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("proctest: start %s: %v", p.name, err)
	}
	lines := make(chan Msg)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			p.output.Write([]byte(line + "\n"))
			if msg, ok := strings.CutPrefix(line, prefix); ok {
				kind, payload, _ := strings.Cut(msg, " ")
				lines <- Msg{Kind: kind, Payload: payload}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.err = cmd.Wait()
		close(p.done)
	}()
	go p.forward(lines)
	t.Cleanup(func() {
		close(p.stop)
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s (exit: %v) output:\n%s", p.name, p.err, p.output.String())
		}
	})
	return p
}

// forward passes the child's lines on to p.msgs, buffering as many as it
// must, so that the child never blocks on its output; it closes p.msgs
// after the last one.
func (p *Proc) forward(lines <-chan Msg) {
	defer close(p.msgs)
	var q []Msg
	for lines != nil || len(q) > 0 {
		var out chan Msg
		var head Msg
		if len(q) > 0 {
			out, head = p.msgs, q[0]
		}
		select {
		case m, ok := <-lines:
			if !ok {
				lines = nil
				continue
			}
			q = append(q, m)
		case out <- head:
			q = q[1:]
		case <-p.stop:
			for range lines {
			}
			return
		}
	}
}

// Name is the child's name in reports.
func (p *Proc) Name() string { return p.name }

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Messages delivers the child's protocol lines, for tests that read them
// from a goroutine of their own or select over several children (Next and
// Expect read the same lines). It is closed after the last line once the
// child exited.
func (p *Proc) Messages() <-chan Msg { return p.msgs }

// Done is closed once the child exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Output is what the child wrote so far, stdout and stderr.
func (p *Proc) Output() string { return p.output.String() }

// Next waits for the child's next protocol line; ok is false once the child
// exited and every line was read.
func (p *Proc) Next(t testing.TB) (m Msg, ok bool) {
	t.Helper()
	timer := time.NewTimer(p.timeout)
	defer timer.Stop()
	select {
	case m, ok = <-p.msgs:
		return m, ok
	case <-timer.C:
		t.Fatalf("proctest: %s: no line within %v; output:\n%s", p.name, p.timeout, p.Output())
		return Msg{}, false
	}
}

// Expect waits for the child's next protocol line, requires it to be of
// kind, and returns its payload.
func (p *Proc) Expect(t testing.TB, kind string) string {
	t.Helper()
	m, ok := p.Next(t)
	if !ok {
		t.Fatalf("proctest: %s exited (%v) while the test waited for %s; output:\n%s", p.name, p.err, kind, p.Output())
	}
	if m.Kind != kind {
		t.Fatalf("proctest: %s said %s %q, the test waited for %s", p.name, m.Kind, m.Payload, kind)
	}
	return m.Payload
}

// Send writes line to the child's stdin (Child.Await reads it).
func (p *Proc) Send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatalf("proctest: %s: write %q: %v", p.name, line, err)
	}
}

// Kill sends SIGKILL, waits for the child to die and requires that it died
// of the signal (not that it had exited before).
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("proctest: %s exited (%v) before it was killed; output:\n%s", p.name, p.err, p.Output())
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("proctest: kill %s: %v", p.name, err)
	}
	err := p.Wait(t)
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("proctest: %s: exit %v, not a signal", p.name, err)
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("proctest: %s: exit %v, not SIGKILL", p.name, err)
	}
}

// Interrupt sends SIGINT: a graceful stop.
func (p *Proc) Interrupt(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatalf("proctest: interrupt %s: %v", p.name, err)
	}
}

// Wait waits for the child to exit and returns its exit error. Its lines
// not read yet stay readable.
func (p *Proc) Wait(t testing.TB) error {
	t.Helper()
	timer := time.NewTimer(p.timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return p.err
	case <-timer.C:
		t.Fatalf("proctest: %s did not exit within %v; output:\n%s", p.name, p.timeout, p.Output())
		return nil
	}
}

// RequireExit waits for the child to exit and requires status 0.
func (p *Proc) RequireExit(t testing.TB) {
	t.Helper()
	if err := p.Wait(t); err != nil {
		t.Fatalf("proctest: %s: %v; output:\n%s", p.name, err, p.Output())
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer = syncbuf.Buffer

// StopAll stops the children gracefully: SIGINT to every one, then it
// requires that each exits with status 0 without an error in its log
// (" level=ERROR ").
func StopAll(t testing.TB, procs []*Proc) {
	t.Helper()
	for _, p := range procs {
		p.Interrupt(t)
	}
	for _, p := range procs {
		p.RequireExit(t)
		if out := p.Output(); strings.Contains(out, " level=ERROR ") {
			t.Fatalf("proctest: %s surfaced an error; output:\n%s", p.name, out)
		}
	}
}
