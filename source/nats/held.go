package nats

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// held is a message received and not yet settled: the Handle of its
// delivery.
type held struct {
	msg       jetstream.Msg
	seq       uint64    // stream sequence
	at        time.Time // when the stream stored it
	delivered uint64    // deliveries so far, this one included
	refreshed atomic.Int64
	done      atomic.Bool // acked, nacked, or not dispatched
}

// heldSet lists the messages held, in arrival order, for in-progress acks.
// Settled ones are dropped as the list is walked.
type heldSet struct {
	mu   sync.Mutex
	list []*held
}

func (hs *heldSet) add(h *held) {
	hs.mu.Lock()
	hs.list = append(hs.list, h)
	hs.mu.Unlock()
}

// due drops the settled messages and returns those not refreshed (received
// or sent an in-progress ack) since before.
func (hs *heldSet) due(before int64) []*held {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	var out []*held
	kept := hs.list[:0]
	for _, h := range hs.list {
		if h.done.Load() {
			continue
		}
		kept = append(kept, h)
		if h.refreshed.Load() < before {
			out = append(out, h)
		}
	}
	clear(hs.list[len(kept):])
	hs.list = kept
	return out
}

// oldest returns the stream time of the oldest message held, if any.
func (hs *heldSet) oldest() (time.Time, bool) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	for _, h := range hs.list {
		if !h.done.Load() {
			return h.at, true
		}
	}
	return time.Time{}, false
}
