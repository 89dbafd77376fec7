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
	g.inflightIn[m.bucket]++
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
		g.inflightIn[m.bucket]--
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
	g.unassignBuckets(c)
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
