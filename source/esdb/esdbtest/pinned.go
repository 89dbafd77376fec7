package esdbtest

import "sort"

// This file holds the Pinned (and PinnedByCorrelation) strategy. It follows
// KurrentDB's PinnedConsumerState
// (src/KurrentDB.Core/Services/PersistentSubscription/ConsumerStrategy/PinnedState/PinnedConsumerState.cs)
// and PinnablePersistentSubscriptionConsumerStrategy:
//
//   - a message's bucket is a hash of its stream modulo 1024, and each
//     bucket is assigned to at most one consumer (g.owner);
//   - an unassigned bucket is assigned, when one of its messages is pushed
//     and some consumer has room, to the consumer with the fewest assigned
//     buckets (the first to join among equals: ChooseClient);
//   - a joining consumer takes, from every consumer that has more than
//     ceil(assigned buckets / consumers) buckets, the excess, buckets with
//     the fewest messages in flight first (AddNode), so buckets with
//     nothing in flight move before busy ones;
//   - the buckets of a consumer that leaves become unassigned
//     (DisconnectNode) and are assigned again when their next message is
//     pushed;
//   - a message whose consumer is full is skipped (KurrentDB moves it to
//     the end of its retry buffer and tries it again at every push): here
//     it is held, and held messages are tried again, in order, before
//     anything else.
//
// One difference: KurrentDB forgets to decrement a bucket's in-flight
// count when the message finishes at a consumer the bucket has moved from;
// here g.inflightIn counts the bucket's messages in flight wherever they
// are.

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

// pinnedOwner returns the consumer of bucket b, assigning b first to the
// consumer with the fewest buckets if it is unassigned (AssignBucket). The
// group must have a consumer.
func (g *psGroup) pinnedOwner(b int) *psConsumer {
	if c := g.owner[b]; c != nil {
		return c
	}
	var least *psConsumer
	for _, c := range g.consumers {
		if least == nil || c.buckets < least.buckets {
			least = c
		}
	}
	g.assignBucket(b, least)
	return least
}

func (g *psGroup) assignBucket(b int, c *psConsumer) {
	if old := g.owner[b]; old != nil {
		old.buckets--
	} else {
		g.assigned++
	}
	g.owner[b] = c
	c.buckets++
}

// addConsumer adds c to the group and rebalances the assigned buckets
// like AddNode: every consumer above ceil(assigned/consumers) gives c its
// excess, the buckets with the fewest messages in flight first (the lowest
// bucket first among equals).
func (g *psGroup) addConsumer(c *psConsumer) {
	g.consumers = append(g.consumers, c)
	if g.assigned == 0 {
		return
	}
	n := len(g.consumers)
	ceiling := (g.assigned + n - 1) / n
	var moves []int
	for _, o := range g.consumers[:n-1] {
		if o.buckets <= ceiling {
			continue
		}
		own := make([]int, 0, o.buckets)
		for b, x := range g.owner {
			if x == o {
				own = append(own, b)
			}
		}
		sort.SliceStable(own, func(i, j int) bool { return g.inflightIn[own[i]] < g.inflightIn[own[j]] })
		moves = append(moves, own[:o.buckets-ceiling]...)
	}
	for _, b := range moves {
		g.assignBucket(b, c)
	}
}

// unassignBuckets unassigns the buckets of c, which leaves (DisconnectNode).
func (g *psGroup) unassignBuckets(c *psConsumer) {
	if c.buckets == 0 {
		return
	}
	for b, x := range g.owner {
		if x == c {
			g.owner[b] = nil
			g.assigned--
		}
	}
	c.buckets = 0
}

// pumpPinned delivers every message to the consumer its bucket is
// assigned to, in order; messages whose consumer is full wait for it.
func (g *psGroup) pumpPinned(s *Server) {
	g.deliverHeld(s)
	for g.hasCapacity() && len(g.held) < pinnedHold {
		m := g.nextMessage(s)
		if m == nil {
			return
		}
		if c := g.pinnedOwner(m.bucket); c.inflight < c.bufSize {
			g.deliver(s, c, m)
		} else {
			g.held = append(g.held, m)
			g.heldIn[m.bucket]++
		}
	}
}

// deliverHeld delivers, in order, the held messages whose consumer has
// room. It looks at held messages only while a consumer with room has some
// or, after a consumer left, while some are in unassigned buckets: other
// pumps cost O(pinnedBuckets).
func (g *psGroup) deliverHeld(s *Server) {
	if len(g.held) == 0 {
		return
	}
	for _, c := range g.consumers {
		c.waiting = 0
	}
	unassigned := false
	for b, k := range g.heldIn {
		if k == 0 {
			continue
		}
		if c := g.owner[b]; c != nil {
			c.waiting += int(k)
		} else {
			unassigned = true
		}
	}
	if unassigned {
		g.deliverHeldAssigning(s)
		return
	}
	deliverable := 0 // held messages whose consumer has room
	for _, c := range g.consumers {
		if c.inflight < c.bufSize {
			deliverable += c.waiting
		}
	}
	if deliverable == 0 {
		return
	}
	kept := g.held[:0]
	for j, m := range g.held {
		c := g.owner[m.bucket]
		if c.inflight >= c.bufSize {
			kept = append(kept, m)
			continue
		}
		g.heldIn[m.bucket]--
		c.waiting--
		deliverable--
		g.deliver(s, c, m)
		if c.inflight >= c.bufSize {
			deliverable -= c.waiting // c is full now: the rest of its own wait
		}
		if deliverable == 0 {
			kept = append(kept, g.held[j+1:]...)
			break
		}
	}
	clear(g.held[len(kept):])
	g.held = kept
}

// deliverHeldAssigning is deliverHeld when some held messages are in
// unassigned buckets: it goes through them in order, assigning their
// buckets, while some consumer has room (PushToClients stops at
// NoMoreCapacity).
func (g *psGroup) deliverHeldAssigning(s *Server) {
	if !g.hasCapacity() {
		return
	}
	kept := g.held[:0]
	for j, m := range g.held {
		if !g.hasCapacity() {
			kept = append(kept, g.held[j:]...)
			break
		}
		c := g.pinnedOwner(m.bucket)
		if c.inflight >= c.bufSize {
			kept = append(kept, m)
			continue
		}
		g.heldIn[m.bucket]--
		g.deliver(s, c, m)
	}
	clear(g.held[len(kept):])
	g.held = kept
}
