package esdbtest

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/persistent"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/google/uuid"
)

// This file holds how a persistent subscription group delivers: reading,
// dispatching to consumers, timeouts, retries, parking, acks and checkpoints.

// readNext returns the next source record matching the filter.
func (g *psGroup) readNext(s *Server) (*record, uint64, bool) {
	if g.all {
		for g.cursor < uint64(len(s.log)) {
			r, k := s.log[g.cursor], g.cursor
			g.cursor++
			if g.filter.match(r) {
				return r, k, true
			}
		}
		return nil, 0, false
	}
	st := s.streams[g.stream]
	if st == nil || st.tombstoned {
		return nil, 0, false
	}
	g.cursor = max(g.cursor, st.tb)
	if g.cursor < uint64(len(st.events)) {
		k := g.cursor
		g.cursor++
		return st.events[k], k, true
	}
	return nil, 0, false
}

func (g *psGroup) nextMessage(s *Server) *psMsg {
	if len(g.retry) > 0 {
		m := g.retry[0]
		g.retry = g.retry[1:]
		return m
	}
	for {
		r, key, ok := g.readNext(s)
		if !ok {
			return nil
		}
		g.lastRead = &key
		ev := s.resolveIfLocked(r, g.settings.resolveLinks)
		id := ev.original().id
		if _, dup := g.outstanding[id]; dup {
			continue // like EventStoreDB: skip a duplicate event id
		}
		m := &psMsg{ev: ev, id: id, key: key, bucket: pinnedBucket(ev)}
		g.outstanding[id] = m
		g.byKey[key] = true
		return m
	}
}

func (g *psGroup) hasCapacity() bool {
	for _, c := range g.consumers {
		if c.inflight < c.bufSize {
			return true
		}
	}
	return false
}

func (g *psGroup) pickConsumer() *psConsumer {
	n := len(g.consumers)
	if g.settings.strategy == strategyDispatchToSingle {
		for _, c := range g.consumers {
			if c.inflight < c.bufSize {
				return c
			}
		}
		return nil
	}
	for i := range n {
		idx := (g.rr + i) % n
		if c := g.consumers[idx]; c.inflight < c.bufSize {
			g.rr = (idx + 1) % n
			return c
		}
	}
	return nil
}

func (g *psGroup) pinned() bool {
	return g.settings.strategy == strategyPinned || g.settings.strategy == strategyPinnedByCorr
}

// pinnedBucket is the Pinned bucket of a message: an FNV-1a hash of its
// stream (the resolved event's, the link's if it did not resolve).
func pinnedBucket(ev resolved) int {
	r := ev.event
	if r == nil {
		r = ev.link
	}
	h := uint64(14695981039346656037) // FNV-1a
	for i := 0; i < len(r.stream); i++ {
		h ^= uint64(r.stream[i])
		h *= 1099511628211
	}
	return int(h % pinnedBuckets)
}

// pinnedConsumer is the consumer of bucket b among the connected ones.
func (g *psGroup) pinnedConsumer(b int) (int, *psConsumer) {
	i := b % len(g.consumers)
	return i, g.consumers[i]
}

// pumpPinned delivers every message to the consumer its stream is pinned
// to, in order; messages whose consumer is full wait for it.
func (g *psGroup) pumpPinned(s *Server) {
	g.deliverHeld(s)
	for g.hasCapacity() && len(g.held) < pinnedHold {
		m := g.nextMessage(s)
		if m == nil {
			return
		}
		if _, c := g.pinnedConsumer(m.bucket); c.inflight < c.bufSize {
			g.deliver(s, c, m)
		} else {
			g.held = append(g.held, m)
			g.heldIn[m.bucket]++
		}
	}
}

// deliverHeld delivers, in order, the held messages whose consumer has
// room. It looks at held messages only while a consumer with room has some:
// a pump whose consumers with room hold nothing costs O(pinnedBuckets).
func (g *psGroup) deliverHeld(s *Server) {
	if len(g.held) == 0 {
		return
	}
	n := len(g.consumers)
	waitingFor := make([]int, n) // held messages per consumer
	for b, k := range g.heldIn {
		waitingFor[b%n] += int(k)
	}
	deliverable := 0 // held messages whose consumer has room
	for i, c := range g.consumers {
		if c.inflight < c.bufSize {
			deliverable += waitingFor[i]
		}
	}
	if deliverable == 0 {
		return
	}
	kept := g.held[:0]
	for j, m := range g.held {
		i, c := g.pinnedConsumer(m.bucket)
		if c.inflight >= c.bufSize {
			kept = append(kept, m)
			continue
		}
		g.heldIn[m.bucket]--
		waitingFor[i]--
		deliverable--
		g.deliver(s, c, m)
		if c.inflight >= c.bufSize {
			deliverable -= waitingFor[i] // c is full now: the rest of its own wait
		}
		if deliverable == 0 {
			kept = append(kept, g.held[j+1:]...)
			break
		}
	}
	clear(g.held[len(kept):])
	g.held = kept
}

// pump delivers as many messages as consumers have room for.
func (g *psGroup) pump(s *Server) {
	if g.deleted || s.stopping || s.shut {
		return
	}
	if len(g.consumers) > 0 && g.pinned() {
		g.pumpPinned(s)
		return
	}
	for g.hasCapacity() {
		m := g.nextMessage(s)
		if m == nil {
			return
		}
		g.deliver(s, g.pickConsumer(), m)
	}
}

func (g *psGroup) deliver(s *Server, c *psConsumer, m *psMsg) {
	m.consumer = c
	c.inflight++
	m.gen++
	gen := m.gen
	m.timer = time.AfterFunc(g.settings.msgTimeout, func() { s.onMessageTimeout(g, m, gen) })
	c.push(psDelivery{ev: m.ev, retry: m.retry})
}

func (s *Server) onMessageTimeout(g *psGroup, m *psMsg, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shut || s.stopping || g.deleted || m.consumer == nil || m.gen != gen || g.outstanding[m.id] != m {
		return
	}
	g.retryOrPark(s, m)
	s.pumpAllLocked()
}

func (g *psGroup) detach(m *psMsg) {
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	if m.consumer != nil {
		m.consumer.inflight--
		m.consumer = nil
	}
}

func (g *psGroup) complete(s *Server, m *psMsg) {
	g.detach(m)
	g.forget(m)
	g.maybeCheckpoint(s, time.Now(), false)
}

// forget removes a finished message from the outstanding ones.
func (g *psGroup) forget(m *psMsg) {
	delete(g.outstanding, m.id)
	delete(g.byKey, m.key)
}

// retryOrPark requeues m with retry count + 1, or parks it when it has
// already been retried MaxRetryCount times (EventStoreDB's rule).
func (g *psGroup) retryOrPark(s *Server, m *psMsg) {
	g.detach(m)
	if m.retry >= g.settings.maxRetry {
		g.park(s, m, fmt.Sprintf("Reached retry count of %d", g.settings.maxRetry))
		return
	}
	m.retry++
	i := sort.Search(len(g.retry), func(i int) bool { return g.retry[i].key > m.key })
	g.retry = append(g.retry, nil)
	copy(g.retry[i+1:], g.retry[i:])
	g.retry[i] = m
}

// park writes a "$>" link to the parked stream, like EventStoreDB.
func (g *psGroup) park(s *Server, m *psMsg, reason string) {
	g.detach(m)
	g.forget(m)
	data := string(m.ev.link.dataOrNil())
	if m.ev.event != nil {
		data = fmt.Sprintf("%d@%s", m.ev.event.revision, m.ev.event.stream)
	}
	meta, _ := json.Marshal(map[string]any{
		"Added":                   time.Now().UTC().Format(time.RFC3339Nano),
		"Reason":                  reason,
		"SubscriptionEventNumber": m.ev.original().revision,
	})
	s.writeLocked(g.parkedStream(), []proposed{{
		id: uuid.New(), eventType: eventTypeLinkTo, contentType: contentTypeBinary, data: []byte(data), meta: meta,
	}})
	g.maybeCheckpoint(s, time.Now(), false)
}

func (r *record) dataOrNil() []byte {
	if r == nil {
		return nil
	}
	return r.data
}

// lowestUnfinished returns the lowest source key read and not finished, or
// the cursor. New messages take keys at the cursor and retries keep theirs,
// so the answer never moves back (until a reload) and advancing g.low over
// finished keys costs O(1) amortized.
func (g *psGroup) lowestUnfinished() uint64 {
	g.low = max(g.low, min(g.cpBase, g.cursor))
	for g.low < g.cursor && !g.byKey[g.low] {
		g.low++
	}
	return g.low
}

// maybeCheckpoint follows EventStoreDB's rule: checkpoint when
// MaxCheckpointCount events are done, or on the clock tick when at least
// MinCheckpointCount are done and CheckpointAfter has elapsed.
func (g *psGroup) maybeCheckpoint(_ *Server, now time.Time, timeCheck bool) {
	if g.deleted {
		return
	}
	low := g.lowestUnfinished()
	if low <= g.cpBase {
		return
	}
	diff := int(low - g.cpBase)
	if now.Sub(g.cpTime) < g.settings.cpAfter && diff < g.settings.maxCP {
		return
	}
	if (diff >= g.settings.minCP && timeCheck) || diff >= g.settings.maxCP {
		cp := low
		g.cp, g.cpBase, g.cpTime = &cp, low, now
	}
}

func (g *psGroup) removeConsumer(s *Server, c *psConsumer) {
	for i, x := range g.consumers {
		if x == c {
			g.consumers = append(g.consumers[:i], g.consumers[i+1:]...)
			break
		}
	}
	if g.rr >= len(g.consumers) {
		g.rr = 0
	}
	if s.stopping || g.deleted {
		return // reload / deletion forgets everything anyway
	}
	var lost []*psMsg
	for _, m := range g.outstanding {
		if m.consumer == c {
			lost = append(lost, m)
		}
	}
	sort.Slice(lost, func(i, j int) bool { return lost[i].key < lost[j].key })
	for _, m := range lost {
		g.retryOrPark(s, m)
	}
}

func (g *psGroup) ack(s *Server, ids []*shared.UUID) {
	for _, pid := range ids {
		id, err := protoToUUID(pid)
		if err != nil {
			continue
		}
		if m := g.outstanding[id]; m != nil && m.consumer != nil {
			g.complete(s, m)
		}
	}
}

// nack handles the Nack actions like EventStoreDB: Retry/Unknown retry (or
// park once retries are exhausted), Park parks, Skip and Stop drop the
// message (Stop does not stop anything server side).
func (g *psGroup) nack(s *Server, ids []*shared.UUID, action persistent.ReadReq_Nack_Action, reason string) {
	for _, pid := range ids {
		id, err := protoToUUID(pid)
		if err != nil {
			continue
		}
		m := g.outstanding[id]
		if m == nil || m.consumer == nil {
			continue
		}
		switch action {
		case persistent.ReadReq_Nack_Retry, persistent.ReadReq_Nack_Unknown:
			g.retryOrPark(s, m)
		case persistent.ReadReq_Nack_Park:
			g.park(s, m, "Client explicitly NAK'ed message.\n"+reason)
		default:
			g.complete(s, m)
		}
	}
}

// pumpAllLocked lets every group deliver what it can. s.mu must be held.
func (s *Server) pumpAllLocked() {
	for _, g := range s.groups {
		g.pump(s)
	}
}
