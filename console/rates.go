package console

import (
	"sync"
	"time"
)

// rates remembers, per generation, the last samples of its rebuild's event
// count and source position time, so the rebuild page can show events per
// second and an ETA from the generations table alone — whichever process
// builds it.
type rates struct {
	mu      sync.Mutex
	samples map[string][]sample
}

type sample struct {
	at     time.Time
	events int64
	posAt  time.Time // the source's time of the last event read
}

// window is how far back the rate is measured.
const window = 30 * time.Second

func newRates() *rates { return &rates{samples: map[string][]sample{}} }

// estimate is a rebuild's speed as measured from samples.
type estimate struct {
	// Rate is events per second; -1 when unknown.
	Rate float64
	// ETA is the time until the rebuild reaches the head of the stream,
	// from how fast it moves through the stream's time; -1 when unknown
	// (or when it does not gain on the head).
	ETA time.Duration
}

// observe records a sample of key and returns the estimate over the
// window.
func (r *rates) observe(key string, now time.Time, events int64, posAt time.Time) estimate {
	r.mu.Lock()
	defer r.mu.Unlock()
	ss := r.samples[key]
	if n := len(ss); n == 0 || ss[n-1].events != events || now.Sub(ss[n-1].at) > time.Second {
		ss = append(ss, sample{at: now, events: events, posAt: posAt})
	}
	for len(ss) > 2 && now.Sub(ss[0].at) > window {
		ss = ss[1:]
	}
	if len(ss) > 64 {
		ss = ss[len(ss)-64:]
	}
	r.samples[key] = ss
	e := estimate{Rate: -1, ETA: -1}
	first, last := ss[0], ss[len(ss)-1]
	dt := last.at.Sub(first.at).Seconds()
	if dt <= 0 {
		return e
	}
	e.Rate = float64(last.events-first.events) / dt
	if !first.posAt.IsZero() && !last.posAt.IsZero() {
		// The rebuild covers the stream's time at speed v; the head moves
		// at 1 s/s: the lag shrinks at v-1.
		v := last.posAt.Sub(first.posAt).Seconds() / dt
		if lag := now.Sub(last.posAt).Seconds(); v > 1 && lag > 0 {
			e.ETA = time.Duration(lag / (v - 1) * float64(time.Second))
		}
	}
	return e
}

// forget drops the samples of keys no longer built.
func (r *rates) forget(keep map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.samples {
		if !keep[k] {
			delete(r.samples, k)
		}
	}
}
