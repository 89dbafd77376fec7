package nats

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/inorder/inorder/source/internal/sourceutil"
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

// progressLoop sends, every AckWait/3, an in-progress ack for each message
// held since the last round: a batch that outlasts AckWait — a slow
// transaction, retries, a full window — keeps its messages, and the server
// does not deliver them to another process meanwhile.
func (s *Source) progressLoop(ctx context.Context) {
	period := s.cfg.AckWait / 3
	sourceutil.Every(ctx, period, false, func() {
		now := time.Now().UnixNano()
		n := 0
		for _, h := range s.held.due(now - int64(period)) {
			if h.done.Load() {
				continue
			}
			if err := h.msg.InProgress(); err != nil {
				continue // gone with the connection: it is delivered again
			}
			h.refreshed.Store(now)
			n++
		}
		if n > 0 {
			s.stats.inProgress.Add(int64(n))
			s.log.Debug("nats in-progress acks sent", "name", s.cfg.Name, "messages", n)
		}
	})
}

// stallAfter is how long without a message, while the server still has
// some for the consumer, means that it holds them back.
func (s *Source) stallAfter() time.Duration {
	return min(max(s.cfg.MaxWait/5, time.Millisecond), 20*time.Millisecond)
}

// stallLoop closes the partial batches at once when the server stops
// delivering although it has messages for the consumer: MaxAckPending is
// reached (by this process and others, or by messages a dead process held
// until their AckWait passes), and nothing comes until some are acked. A
// worker would otherwise wait MaxWait for each batch to fill; the window of
// this process, which would close them too, is not full. Flush settles what
// was dispatched; the acks it sends let the server deliver again.
func (s *Source) stallLoop(ctx context.Context) {
	after := s.stallAfter()
	sourceutil.Every(ctx, after/2, false, func() {
		if s.serverPending.Load() == 0 || s.flushing.Load() {
			return
		}
		if time.Since(time.Unix(0, s.lastRecv.Load())) < after {
			return
		}
		if st := s.disp.Stats(); st.InFlight == 0 || st.InFlight >= st.MaxInFlight {
			return // nothing held, or the window closes batches itself
		}
		s.flushing.Store(true)
		s.stats.kicks.Add(1)
		go func() {
			defer s.flushing.Store(false)
			_ = s.disp.Flush(ctx)
		}()
	})
}
