package sourceutil

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/source"
)

// Drain returns the two contexts of a source's Run. soft is cancelled when
// ctx is, or when hard is: the source stops receiving. hard is cancelled
// when abort is closed, or timeout after ctx is cancelled (onTimeout is
// called then, to log it): the batches in flight roll back. cancelSoft
// cancels soft early. stop releases both; the caller defers it.
func Drain(ctx context.Context, abort <-chan struct{}, timeout time.Duration, onTimeout func()) (soft, hard context.Context, cancelSoft, stop context.CancelFunc) {
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		select {
		case <-abort:
			cancelHard()
		case <-hard.Done():
		}
	}()
	stopTimer := context.AfterFunc(ctx, func() {
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-t.C:
			onTimeout()
			cancelHard()
		case <-hard.Done():
		}
	})
	soft, cancelSoft = context.WithCancel(ctx)
	stopSoft := context.AfterFunc(hard, cancelSoft)
	return soft, hard, cancelSoft, func() {
		stopSoft()
		cancelSoft()
		stopTimer()
		cancelHard()
	}
}

// Work runs d in a goroutine until hard is cancelled or stop is called; work
// is the context it runs under. stop cancels work and waits for d's Run to
// return; it may be called more than once.
func Work(hard context.Context, d *source.Dispatcher) (work context.Context, stop func()) {
	work, stopWork := context.WithCancel(hard)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(work)
	}()
	return work, func() {
		stopWork()
		<-done
	}
}

// Sessions is a source's loop of sessions: Consume runs Session again and
// again, with backoff between them, until soft is done or the server
// rejects the source for good.
type Sessions struct {
	// Min and Max bound the backoff (internal/retry, reset by a session
	// that progressed).
	Min, Max time.Duration
	// Reconnects is added 1 before every session after the first.
	Reconnects *atomic.Int64
	// Session runs one session; progressed reports whether it received
	// anything.
	Session func() (progressed bool, err error)
	// Rejected returns the error to stop with when err means the server
	// rejected the source for good, nil otherwise.
	Rejected func(err error) error
	// OnRejected and OnLost log the end of a session: rejected for good,
	// or lost (the next one starts in wait).
	OnRejected func(rej error)
	OnLost     func(err error, wait time.Duration)
}

// Consume runs sessions until soft is done (it returns nil then) or a
// session's error is Rejected (it returns that).
func (c Sessions) Consume(soft context.Context) error {
	backoff := retry.Policy{Initial: c.Min, Max: c.Max, MaxElapsed: -1}.Start()
	for attempt := 0; soft.Err() == nil; attempt++ {
		if attempt > 0 {
			c.Reconnects.Add(1)
		}
		progressed, err := c.Session()
		if soft.Err() != nil {
			return nil
		}
		if rej := c.Rejected(err); rej != nil {
			c.OnRejected(rej)
			return rej
		}
		if progressed {
			backoff.Reset()
		}
		wait, _ := backoff.Next()
		c.OnLost(err, wait)
		_ = retry.Sleep(soft, wait)
	}
	return nil
}

// Every calls fn every d until ctx is done, first at once when now is set.
func Every(ctx context.Context, d time.Duration, now bool, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		if now {
			fn()
		}
		now = true
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
