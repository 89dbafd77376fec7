package runtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// Signal is a coalescing "something happened" channel: Notify never
// blocks, and a wait after it returns at once, however many notifications
// came since the last.
type Signal chan struct{}

// NewSignal returns a Signal.
func NewSignal() Signal { return make(Signal, 1) }

// Notify signals s.
func (s Signal) Notify() {
	select {
	case s <- struct{}{}:
	default:
	}
}

// Ticks returns a signal that fires every d until the test ends, for
// conditions that no hook signals.
func Ticks(tb testing.TB, d time.Duration) Signal {
	s := NewSignal()
	tk := time.NewTicker(d)
	done := make(chan struct{})
	tb.Cleanup(func() { tk.Stop(); close(done) })
	go func() {
		for {
			select {
			case <-tk.C:
				s.Notify()
			case <-done:
				return
			}
		}
	}()
	return s
}

// WaitFor re-checks cond each time sig fires until it holds; the test
// fails when timeout passes first.
func WaitFor(tb testing.TB, sig <-chan struct{}, timeout time.Duration, cond func() bool, what string) {
	tb.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-sig:
		case <-deadline.C:
			tb.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Runner is what Start runs: a source's Run and Abort.
type Runner interface {
	Run(ctx context.Context) error
	Abort()
}

// Background is a Runner running in the background.
type Background struct {
	r       Runner
	cancel  context.CancelFunc
	done    chan error
	timeout time.Duration
	once    sync.Once
	err     error
}

// Start runs r in the background until Stop or the end of the test, when
// an error of Run other than aborted fails the test.
func Start(tb testing.TB, r Runner, timeout time.Duration, aborted error) *Background {
	ctx, cancel := context.WithCancel(context.Background())
	b := &Background{r: r, cancel: cancel, done: make(chan error, 1), timeout: timeout}
	go func() { b.done <- r.Run(ctx) }()
	tb.Cleanup(func() {
		if err := b.Stop(); err != nil && !errors.Is(err, aborted) {
			tb.Errorf("source stopped with %v", err)
		}
	})
	return b
}

// Stop drains the source (Abort after the timeout) and returns Run's error.
func (b *Background) Stop() error {
	b.once.Do(func() {
		b.cancel()
		select {
		case b.err = <-b.done:
		case <-time.After(b.timeout):
			b.r.Abort()
			b.err = <-b.done
		}
	})
	return b.err
}
