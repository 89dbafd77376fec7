package source

import (
	"slices"
	"sync"
)

// Ticket identifies one tracked position in a [Tracker]. Tickets increase
// with every Track call and are never reused, not even after Reset; the zero
// Ticket means "not tracked".
type Ticket uint64

// Tracker computes the low watermark of positions processed out of order: the
// highest position P such that every tracked position at or before P is done.
// Positions must be tracked (Track, Pass) in the order of the log they come
// from; P is opaque to the Tracker, which never compares positions. A Tracker
// is safe for concurrent use.
type Tracker[P any] struct {
	mu      sync.Mutex
	next    Ticket // next ticket to hand out
	head    Ticket // ticket of entries[0]
	entries []trackEntry[P]
	mark    P
	hasMark bool
	last    P     // the last position tracked or passed
	hasLast bool  // false until one was, and after Reset
	tracked int64 // Track calls ever
}

type trackEntry[P any] struct {
	pos  P
	done bool
}

// NewTracker returns an empty Tracker without a watermark.
func NewTracker[P any]() *Tracker[P] {
	return &Tracker[P]{next: 1, head: 1}
}

// Reset forgets every tracked position and sets the watermark to mark (none
// when ok is false), for a source that starts reading again from mark.
// Tickets handed out before are ignored from now on.
func (t *Tracker[P]) Reset(mark P, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.entries = nil
	t.head = t.next
	t.mark, t.hasMark = mark, ok
	t.last, t.hasLast = mark, ok
}

// Track records a position that is now in flight and returns its ticket, to
// be passed to Done once the position's effects are committed.
func (t *Tracker[P]) Track(p P) Ticket {
	t.mu.Lock()
	defer t.mu.Unlock()
	tk := t.next
	t.next++
	t.entries = append(t.entries, trackEntry[P]{pos: p})
	t.last, t.hasLast = p, true
	t.tracked++
	return tk
}

// Pass records a position that needs no work — a skipped event, a server
// checkpoint — so the watermark reaches it once everything tracked before it
// is done.
func (t *Tracker[P]) Pass(p P) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last, t.hasLast = p, true
	if len(t.entries) == 0 {
		t.mark, t.hasMark = p, true
		return
	}
	t.next++
	t.entries = append(t.entries, trackEntry[P]{pos: p, done: true})
}

// Done marks tickets done (committed) and returns the new watermark. Tickets
// from before the last Reset, or already done, are ignored.
func (t *Tracker[P]) Done(tickets ...Ticket) (P, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tk := range tickets {
		if i := int(tk - t.head); tk >= t.head && i < len(t.entries) {
			t.entries[i].done = true
		}
	}
	n := 0
	for n < len(t.entries) && t.entries[n].done {
		n++
	}
	if n > 0 {
		t.mark, t.hasMark = t.entries[n-1].pos, true
		clear(t.entries[:n])
		t.entries = t.entries[n:]
		t.head += Ticket(n)
	}
	return t.mark, t.hasMark
}

// Watermark returns the highest position whose predecessors, and itself, are
// all done; ok is false before any position is done (and after a Reset
// without a mark).
func (t *Tracker[P]) Watermark() (p P, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mark, t.hasMark
}

// WatermarkWith returns the watermark as if tickets were done as well,
// without marking them: the position a batch's transaction may store as its
// checkpoint, since it commits together with the batch's own deliveries.
func (t *Tracker[P]) WatermarkWith(tickets []Ticket) (p P, ok bool) {
	ts := slices.Clone(tickets)
	slices.Sort(ts)
	t.mu.Lock()
	defer t.mu.Unlock()
	j, n := 0, 0
	for n < len(t.entries) {
		tk := t.head + Ticket(n)
		for j < len(ts) && ts[j] < tk {
			j++
		}
		if !t.entries[n].done && (j == len(ts) || ts[j] != tk) {
			break
		}
		n++
	}
	if n == 0 {
		return t.mark, t.hasMark
	}
	return t.entries[n-1].pos, true
}

// InFlight returns how many tracked positions are not done yet, plus the
// done ones waiting behind them.
func (t *Tracker[P]) InFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

// Oldest returns the earliest tracked position that is not done, and false
// when every tracked position is done.
func (t *Tracker[P]) Oldest() (p P, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.entries {
		if !e.done {
			return e.pos, true
		}
	}
	return p, false
}

// Last returns the last position tracked or passed since the last Reset (or
// the mark Reset set; ok is false when there is none), and how many
// positions Track ever recorded: a source reading ahead compares the count
// over time to tell how far it got.
func (t *Tracker[P]) Last() (p P, tracked int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last, t.tracked, t.hasLast
}
