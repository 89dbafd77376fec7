package demo

import (
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/effects"
)

// This file holds the workload's effects as the demo sees them and the
// in-process webhook receiver they are sent to; effects.go starts them
// and checks what the receiver got.

// Effects are a workload's effects that leave Postgres, which the demo
// performs against an in-process HTTP receiver (Workload.Effects).
type Effects struct {
	// What names one notification in the summary ("settled payments").
	What string
	// Handlers returns the effect handlers, sending to the receiver at
	// url; every call must carry the intent's key in the Idempotency-Key
	// header.
	Handlers func(url string) []effects.Handler
	// Expected returns the idempotency keys the receiver must get, once
	// each, for the workload's events.
	Expected func(events []aggregate.Event) (map[string]bool, error)
}

// receiver is the demo's webhook receiver: it counts every delivery by
// idempotency key and applies each key once. It answers the first delivery
// of about one key in ten with a 503, as real receivers sometimes do, so
// some notifications are retried.
type receiver struct {
	srv *httptest.Server

	mu         sync.Mutex
	deliveries int
	accepted   map[string]int // 2xx answers per key
	refused    int
	changed    chan struct{}
}

func newReceiver() *receiver {
	r := &receiver{accepted: map[string]int{}, changed: make(chan struct{})}
	r.srv = httptest.NewServer(r)
	return r
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	key := req.Header.Get("Idempotency-Key")
	if req.Method != http.MethodPost || key == "" {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deliveries++
	close(r.changed)
	r.changed = make(chan struct{})
	h := fnv.New32a()
	h.Write([]byte(key))
	if _, seen := r.accepted[key]; !seen && h.Sum32()%10 == 0 {
		r.accepted[key] = 0 // refused once; the retry is accepted
		r.refused++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	r.accepted[key]++ // a receiver with idempotency keys applies the first only
	w.WriteHeader(http.StatusNoContent)
}

// snapshot returns how many times the receiver accepted each key (applying
// the first), its deliveries, the 503s among them, and a channel closed at
// the next delivery.
func (r *receiver) snapshot() (accepted map[string]int, deliveries, refused int, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	accepted = map[string]int{}
	for k, n := range r.accepted {
		if n > 0 {
			accepted[k] = n
		}
	}
	return accepted, r.deliveries, r.refused, r.changed
}
