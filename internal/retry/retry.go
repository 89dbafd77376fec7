package retry

import (
	"cmp"
	"context"
	"math/rand/v2"
	"time"
)

// Defaults of Policy.
const (
	DefaultInitial    = 20 * time.Millisecond
	DefaultMax        = 5 * time.Second
	DefaultMaxElapsed = time.Minute
)

// Policy is a backoff policy. The zero value is valid: every field has a
// default.
type Policy struct {
	// Initial bounds the first delay. Default DefaultInitial (20 ms).
	Initial time.Duration
	// Max caps every delay. Default DefaultMax (5 s).
	Max time.Duration
	// MaxElapsed bounds the time a Backoff keeps retrying, from Start.
	// Default DefaultMaxElapsed (1 min); negative means no bound.
	MaxElapsed time.Duration
}

func (p Policy) norm() Policy {
	p.Initial = cmp.Or(max(p.Initial, 0), DefaultInitial)
	p.Max = max(cmp.Or(max(p.Max, 0), DefaultMax), p.Initial)
	p.MaxElapsed = cmp.Or(p.MaxElapsed, DefaultMaxElapsed)
	return p
}

// Delay returns the delay before retry n (1-based), jitter included.
func (p Policy) Delay(n int) time.Duration {
	p = p.norm()
	d := p.Max
	if n < 1 {
		n = 1
	}
	if shift := n - 1; shift < 62 && p.Initial<<shift > 0 && p.Initial<<shift < p.Max {
		d = p.Initial << shift
	}
	return d/2 + rand.N(d/2+1)
}

// Start begins the retries of one operation, now.
func (p Policy) Start() *Backoff { return &Backoff{p: p.norm(), start: time.Now()} }

// Backoff counts the retries of one operation. It is not safe for
// concurrent use.
type Backoff struct {
	p     Policy
	start time.Time
	n     int
}

// Next returns the delay before the next attempt, and false instead when
// waiting it would pass the policy's MaxElapsed.
func (b *Backoff) Next() (time.Duration, bool) {
	d := b.p.Delay(b.n + 1)
	if b.p.MaxElapsed > 0 && time.Since(b.start)+d > b.p.MaxElapsed {
		return 0, false
	}
	b.n++
	return d, true
}

// Wait sleeps for the next delay. It returns false without sleeping when
// the policy's MaxElapsed is spent, and ctx's error if ctx ends first.
func (b *Backoff) Wait(ctx context.Context) (bool, error) {
	d, ok := b.Next()
	if !ok {
		return false, nil
	}
	return true, Sleep(ctx, d)
}

// Retries returns how many delays Next has handed out.
func (b *Backoff) Retries() int { return b.n }

// Elapsed returns the time since Start.
func (b *Backoff) Elapsed() time.Duration { return time.Since(b.start) }

// Reset starts the count and the elapsed time again, after a success.
func (b *Backoff) Reset() { b.n, b.start = 0, time.Now() }

// Sleep waits for d, or until ctx ends, and then returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
