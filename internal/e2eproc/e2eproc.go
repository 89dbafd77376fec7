package e2eproc

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Proc is a child process.
type Proc struct {
	// Name names the process in errors.
	Name string
	// Metrics is the URL of its /metrics, if it serves one.
	Metrics string
	cmd     *exec.Cmd
	done    chan error
}

// Start starts cmd, its stderr passed through, and names it name.
func Start(name string, cmd *exec.Cmd) (*Proc, error) {
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// Done receives the process's exit (Wait's error) once it ended.
func (p *Proc) Done() <-chan error { return p.done }

// Stop reads the process's VmHWM, sends SIGTERM (a graceful drain), waits
// (a minute at most, then SIGKILL), and returns its peak RSS in MiB: VmHWM,
// read just before the stop. Not the maximum RSS wait4 reports at exit:
// Linux counts in it the memory of the process before its exec — the
// orchestrator's, which holds the whole workload — so a small child spawned
// from a big parent reports the parent's size. The drain adds nothing.
func (p *Proc) Stop() (float64, error) {
	hwm := VmHWM(p.cmd.Process.Pid)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			return hwm, fmt.Errorf("%s: %w", p.Name, err)
		}
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
		return hwm, fmt.Errorf("%s did not stop", p.Name)
	}
	return hwm, nil
}

// VmHWM returns the process's peak resident set (VmHWM) in MiB, 0 if
// unknown.
func VmHWM(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}

// FreePort returns a TCP port free on 127.0.0.1 now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Scrape sums a metric family from a worker's /metrics (only the series
// with outcome=outcome if outcome is set); 0 while it does not answer.
func Scrape(u, family, outcome string) float64 {
	resp, err := http.Get(u)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0
	}
	var sum float64
	for _, m := range fams[family].GetMetric() {
		ok := outcome == ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "outcome" && l.GetValue() == outcome {
				ok = true
			}
		}
		if !ok {
			continue
		}
		switch {
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// Parked returns the parked deliveries the workers ps counted in all.
func Parked(ps []*Proc) float64 {
	var n float64
	for _, p := range ps {
		n += Scrape(p.Metrics, "inorder_events_total", "parked")
	}
	return n
}

// StartServe starts the command's own server process ('<self> serve
// args…'), named name, and returns it and the address on the first line it
// prints, after prefix. The process is returned (to stop) as soon as it
// started, even when its line could not be read.
func StartServe(name, prefix string, args ...string) (*Proc, string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(self, append([]string{"serve"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	p, err := Start(name, cmd)
	if err != nil {
		return nil, "", err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return p, "", fmt.Errorf("%s: %w", name, err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	return p, strings.TrimSpace(strings.TrimPrefix(line, prefix)), nil
}
