package esdbtest

import (
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// Pinned follows KurrentDB's PinnedConsumerState (see pinned.go). The
// scenario tests below are modelled on KurrentDB's
// src/KurrentDB.Core.Tests/Services/PersistentSubscription/PinnedConsumerStrategyTests.cs;
// TestPinnedMatchesReference compares the group with a plain port of
// KurrentDB's state machine.

// pinnedHarness drives a Pinned group on $all of a bare server by hand.
type pinnedHarness struct {
	t    *testing.T
	s    *Server
	g    *psGroup
	seen map[*psConsumer][]string // "<stream>/<revision>" received, in order
}

func newPinnedHarness(t *testing.T) *pinnedHarness {
	g := newPinnedGroup("pinned")
	t.Cleanup(g.stopTimers)
	return &pinnedHarness{t: t, s: newBareServer(), g: g, seen: map[*psConsumer][]string{}}
}

func newPinnedGroup(key string) *psGroup {
	return &psGroup{
		key: key, stream: "$all", all: true,
		settings:    psSettings{strategy: strategyPinned, msgTimeout: 1 << 62, maxRetry: 1 << 20, maxCP: 1000},
		outstanding: map[uuid.UUID]*psMsg{}, byKey: map[uint64]bool{},
	}
}

func newTestConsumer(bufSize int) *psConsumer {
	return &psConsumer{bufSize: bufSize, wake: make(chan struct{}, 1)}
}

func (h *pinnedHarness) pump() {
	h.g.pump(h.s)
	for _, c := range h.g.consumers {
		for _, d := range c.queue {
			r := d.ev.original()
			h.seen[c] = append(h.seen[c], fmt.Sprintf("%s/%d", r.stream, r.revision))
		}
		c.queue = nil
	}
}

func (h *pinnedHarness) join(bufSize int) *psConsumer {
	c := newTestConsumer(bufSize)
	h.g.addConsumer(c)
	h.pump()
	return c
}

func (h *pinnedHarness) leave(c *psConsumer) {
	h.g.removeConsumer(h.s, c)
	h.pump()
}

func (h *pinnedHarness) write(streams ...string) {
	for _, st := range streams {
		h.s.writeLocked(st, []proposed{{eventType: "E"}})
	}
	h.pump()
}

// ack acknowledges the messages of stream in flight at c.
func (h *pinnedHarness) ack(c *psConsumer, streams ...string) {
	for _, st := range streams {
		for _, m := range h.g.outstanding {
			if m.consumer == c && m.ev.original().stream == st {
				h.g.complete(h.s, m)
			}
		}
	}
	h.pump()
}

func (h *pinnedHarness) owner(stream string) *psConsumer {
	return h.g.owner[pinnedBucket(resolved{event: &record{stream: stream}})]
}

// pinnedStreams returns n stream names in distinct buckets, sorted by
// bucket.
func pinnedStreams(n int) []string {
	byBucket := map[int]string{}
	for i := 0; len(byBucket) < n; i++ {
		st := fmt.Sprintf("stream-%d", i)
		b := pinnedBucket(resolved{event: &record{stream: st}})
		if _, dup := byBucket[b]; !dup {
			byBucket[b] = st
		}
	}
	buckets := make([]int, 0, n)
	for b := range byBucket {
		buckets = append(buckets, b)
	}
	sort.Ints(buckets)
	out := make([]string, n)
	for i, b := range buckets {
		out[i] = byBucket[b]
	}
	return out
}

// Like new_stream_is_round_robinned_to_next_consumer and
// live_subscription_with_pinned_pushes_events_to_same_client_for_stream_id:
// a new stream goes to the consumer with the fewest buckets, the first to
// join among equals, and stays there.
func TestPinnedLazyAssignment(t *testing.T) {
	h := newPinnedHarness(t)
	c1, c2 := h.join(10), h.join(10)
	st := pinnedStreams(4)
	h.write(st[0], st[0])
	require.Equal(t, []string{st[0] + "/0", st[0] + "/1"}, h.seen[c1])
	require.Empty(t, h.seen[c2])
	h.write(st[1], st[1])
	require.Equal(t, []string{st[1] + "/0", st[1] + "/1"}, h.seen[c2])
	h.write(st[0], st[2], st[3])
	require.Equal(t, []string{st[0] + "/0", st[0] + "/1", st[0] + "/2", st[2] + "/0"}, h.seen[c1])
	require.Equal(t, []string{st[1] + "/0", st[1] + "/1", st[3] + "/0"}, h.seen[c2])
	require.Equal(t, 2, c1.buckets)
	require.Equal(t, 2, c2.buckets)
	require.Equal(t, 4, h.g.assigned)
}

// Like new_subscription_gets_work: a joining consumer takes the excess of
// the others (here every bucket has one message in flight: the lowest
// buckets move).
func TestPinnedJoinGetsWork(t *testing.T) {
	h := newPinnedHarness(t)
	c1, c2 := h.join(10), h.join(10)
	st := pinnedStreams(6)
	h.write(st...)
	require.Len(t, h.seen[c1], 3)
	require.Len(t, h.seen[c2], 3)
	c3 := h.join(10)
	require.Equal(t, []int{2, 2, 2}, []int{c1.buckets, c2.buckets, c3.buckets})
	require.Equal(t, c3, h.owner(st[0]), "c1's lowest bucket moved")
	require.Equal(t, c3, h.owner(st[1]), "c2's lowest bucket moved")
	h.write(st...)
	require.Len(t, h.seen[c1], 5)
	require.Len(t, h.seen[c2], 5)
	require.Equal(t, []string{st[0] + "/1", st[1] + "/1"}, h.seen[c3])
}

// AddNode takes "buckets without inflight messages first": a joining
// consumer gets the idle buckets, then the least busy ones, so streams
// with messages in flight stay where they are.
func TestPinnedJoinMovesFewestInFlightFirst(t *testing.T) {
	h := newPinnedHarness(t)
	c1 := h.join(100)
	st := pinnedStreams(6)
	h.write(st...)
	h.ack(c1, st[3], st[4], st[5]) // the three highest buckets are idle
	c2 := h.join(100)
	require.Equal(t, []int{3, 3}, []int{c1.buckets, c2.buckets})
	for i, s := range st {
		want := c1
		if i >= 3 {
			want = c2
		}
		require.Equal(t, want, h.owner(s), s)
	}
	h.write(st...)
	require.Equal(t, []string{st[3] + "/1", st[4] + "/1", st[5] + "/1"}, h.seen[c2])

	// Busy buckets: the least busy move first.
	h = newPinnedHarness(t)
	c1 = h.join(100)
	st = pinnedStreams(4)
	h.write(st[0], st[0], st[0], st[1], st[2], st[2], st[3], st[3], st[3], st[3]) // in flight: 3, 1, 2, 4
	c2 = h.join(100)
	require.Equal(t, []int{2, 2}, []int{c1.buckets, c2.buckets})
	require.Equal(t, []*psConsumer{c1, c2, c2, c1}, []*psConsumer{h.owner(st[0]), h.owner(st[1]), h.owner(st[2]), h.owner(st[3])})
	require.Equal(t, []int32{3, 1, 2, 4}, func() (n []int32) {
		for _, s := range st {
			n = append(n, h.g.inflightIn[pinnedBucket(resolved{event: &record{stream: s}})])
		}
		return n
	}())
}

// Like unsubscribed_client_has_assigned_streams_sent_to_another_client:
// the buckets of a consumer that leaves are unassigned, its unacked
// messages retried at the consumer their bucket is assigned to next.
func TestPinnedLeaveUnassigns(t *testing.T) {
	h := newPinnedHarness(t)
	c1, c2 := h.join(10), h.join(10)
	st := pinnedStreams(3)
	h.write(st[0], st[1], st[2])
	require.Equal(t, []string{st[0] + "/0", st[2] + "/0"}, h.seen[c1])
	require.Equal(t, []string{st[1] + "/0"}, h.seen[c2])
	h.leave(c2)
	require.Equal(t, []string{st[0] + "/0", st[2] + "/0", st[1] + "/0"}, h.seen[c1], "retried at c1")
	require.Equal(t, c1, h.owner(st[1]))

	// A bucket with nothing pending stays unassigned until its next
	// message, which goes to the consumer with the fewest buckets.
	h = newPinnedHarness(t)
	c1, c2 = h.join(10), h.join(10)
	h.write(st[0], st[1])
	h.ack(c2, st[1])
	h.leave(c2)
	require.Nil(t, h.owner(st[1]))
	require.Equal(t, 1, h.g.assigned)
	c3 := h.join(10) // ceil(1/2) = 1: nothing moves
	require.Equal(t, []int{1, 0}, []int{c1.buckets, c3.buckets})
	h.write(st[1])
	require.Equal(t, []string{st[1] + "/1"}, h.seen[c3])
}

// Like events_are_skipped_if_assigned_client_full: a message whose
// consumer is full waits (in order) while other streams go on.
func TestPinnedHoldsWhileFull(t *testing.T) {
	h := newPinnedHarness(t)
	c1, c2 := h.join(1), h.join(1)
	st := pinnedStreams(2)
	h.write(st[0], st[0])
	require.Equal(t, []string{st[0] + "/0"}, h.seen[c1])
	require.Len(t, h.g.held, 1)
	h.write(st[1])
	require.Equal(t, []string{st[1] + "/0"}, h.seen[c2])
	require.Len(t, h.g.held, 1)
	h.ack(c1, st[0])
	require.Equal(t, []string{st[0] + "/0", st[0] + "/1"}, h.seen[c1])
	require.Empty(t, h.g.held)
}

// refPinned is a plain port of KurrentDB's PinnedConsumerState and
// PinnablePersistentSubscriptionConsumerStrategy.PushMessageToClient (the
// in-flight counts counted from the outstanding messages, see pinned.go):
// every pump tries every held message, like PushToClients scans its retry
// buffer.
type refPinned struct {
	g      *psGroup
	nodes  []*psConsumer              // connected, in join order
	assign [pinnedBuckets]*psConsumer // nil: unassigned (or disconnected)
}

func (r *refPinned) assignmentCount(c *psConsumer) int {
	n := 0
	for _, x := range r.assign {
		if x != nil && (c == nil || x == c) {
			n++
		}
	}
	return n
}

// inFlight counts the messages in flight per bucket.
func (r *refPinned) inFlight() (n [pinnedBuckets]int32) {
	for _, m := range r.g.outstanding {
		if m.consumer != nil {
			n[pinnedBucket(m.ev)]++
		}
	}
	return n
}

func (r *refPinned) addNode(c *psConsumer) {
	r.g.consumers = append(r.g.consumers, c)
	r.nodes = append(r.nodes, c)
	maxBalanced := int(math.Ceil(float64(r.assignmentCount(nil)) / float64(len(r.nodes))))
	var reassignments []int
	inFlight := r.inFlight()
	for _, e := range r.nodes {
		if e == c {
			continue
		}
		if n := r.assignmentCount(e); n > maxBalanced {
			var own []int
			for b, x := range r.assign {
				if x == e {
					own = append(own, b)
				}
			}
			sort.SliceStable(own, func(i, j int) bool { return inFlight[own[i]] < inFlight[own[j]] })
			reassignments = append(reassignments, own[:n-maxBalanced]...)
		}
	}
	for _, b := range reassignments {
		r.assign[b] = c
	}
}

func (r *refPinned) disconnectNode(s *Server, c *psConsumer) {
	for i, x := range r.nodes {
		if x == c {
			r.nodes = append(r.nodes[:i], r.nodes[i+1:]...)
			break
		}
	}
	for b, x := range r.assign {
		if x == c {
			r.assign[b] = nil
		}
	}
	r.g.removeConsumer(s, c)
}

func (r *refPinned) availableCapacity() bool {
	for _, c := range r.nodes {
		if c.inflight < c.bufSize {
			return true
		}
	}
	return false
}

// push is PushMessageToClient once there is capacity: false is Skipped.
func (r *refPinned) push(s *Server, m *psMsg) bool {
	b := pinnedBucket(m.ev)
	if r.assign[b] == nil {
		var least *psConsumer
		for _, c := range r.nodes {
			if least == nil || r.assignmentCount(c) < r.assignmentCount(least) {
				least = c
			}
		}
		r.assign[b] = least
	}
	c := r.assign[b]
	if c.inflight >= c.bufSize {
		return false
	}
	r.g.deliver(s, c, m)
	return true
}

func (r *refPinned) pump(s *Server) {
	g := r.g
	if len(r.nodes) == 0 {
		return
	}
	kept := g.held[:0]
	for i, m := range g.held {
		if !r.availableCapacity() {
			kept = append(kept, g.held[i:]...)
			break
		}
		if !r.push(s, m) {
			kept = append(kept, m)
		}
	}
	clear(g.held[len(kept):])
	g.held = kept
	for r.availableCapacity() && len(g.held) < pinnedHold {
		m := g.nextMessage(s)
		if m == nil {
			return
		}
		if !r.push(s, m) {
			g.held = append(g.held, m)
		}
	}
}

// TestPinnedMatchesReference runs a Pinned group and the reference through
// the same random consumers joining and leaving, acks, retries and
// appends, and requires the same deliveries, in the same order, the same
// held messages and the same bucket assignments after every step.
func TestPinnedMatchesReference(t *testing.T) {
	s := newBareServer()
	write := func(n int) {
		for i := range n {
			s.writeLocked(fmt.Sprintf("acct-%d", (i*7+len(s.log))%97), []proposed{{eventType: "E"}})
		}
	}
	write(400)
	ref := &refPinned{g: newPinnedGroup("ref")}
	got := newPinnedGroup("got")
	defer ref.g.stopTimers()
	defer got.stopTimers()

	seed := uint64(1)
	rnd := func(n int) int { // a deterministic xorshift
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		return int(seed % uint64(n))
	}
	type delivery struct {
		id    uuid.UUID
		retry int
	}
	sent := map[*psConsumer][]delivery{}
	drain := func(c *psConsumer) {
		for _, d := range c.queue {
			sent[c] = append(sent[c], delivery{d.ev.original().id, d.retry})
		}
		c.queue = nil
	}
	ids := func(ms []*psMsg) []uuid.UUID {
		var out []uuid.UUID
		for _, m := range ms {
			out = append(out, m.id)
		}
		return out
	}
	inflight := func(g *psGroup, c *psConsumer) []*psMsg { // once each, even if c got it twice
		var out []*psMsg
		seen := map[*psMsg]bool{}
		for _, d := range sent[c] {
			if m := g.outstanding[d.id]; m != nil && m.consumer == c && !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
		return out
	}
	busyMoves, joins, leaves, heldSteps := 0, 0, 0, 0
	for step := range 4000 {
		switch op := rnd(12); {
		case op == 0 && len(got.consumers) < 4 || len(got.consumers) == 0:
			size := 1 + rnd(12)
			c := newTestConsumer(size)
			ref.addNode(newTestConsumer(size))
			got.addConsumer(c)
			for b := range got.owner { // buckets moved to the newcomer with events in flight
				if got.owner[b] == c && got.inflightIn[b] > 0 {
					busyMoves++
				}
			}
			joins++
		case op == 1:
			i := rnd(len(got.consumers))
			ref.disconnectNode(s, ref.g.consumers[i])
			got.removeConsumer(s, got.consumers[i])
			leaves++
		case op == 2:
			write(1 + rnd(30))
		default: // finish some messages of one consumer, or of all: ack or retry
			first, end := 0, len(got.consumers)
			if op < 7 && end > 0 {
				first = rnd(end)
				end = first + 1
			}
			for i := first; i < end; i++ {
				rm, gm := inflight(ref.g, ref.g.consumers[i]), inflight(got, got.consumers[i])
				require.Equal(t, ids(rm), ids(gm), "step %d: in flight", step)
				for k := range rm {
					switch rnd(4) {
					case 0:
					case 1:
						ref.g.retryOrPark(s, rm[k])
						got.retryOrPark(s, gm[k])
					default:
						ref.g.complete(s, rm[k])
						got.complete(s, gm[k])
					}
				}
			}
		}
		ref.pump(s)
		got.pump(s)
		require.Equal(t, len(ref.g.consumers), len(got.consumers))
		index := func(cs []*psConsumer, c *psConsumer) int {
			for i, x := range cs {
				if x == c {
					return i
				}
			}
			return -1
		}
		for i, c := range got.consumers {
			require.Equal(t, ref.assignmentCount(ref.g.consumers[i]), c.buckets, "step %d: consumer %d's buckets", step, i)
			drain(ref.g.consumers[i])
			drain(c)
			require.Equal(t, sent[ref.g.consumers[i]], sent[c], "step %d: consumer %d's deliveries", step, i)
		}
		assigned := 0
		var refOwner, gotOwner [pinnedBuckets]int
		for b := range pinnedBuckets {
			refOwner[b], gotOwner[b] = index(ref.g.consumers, ref.assign[b]), index(got.consumers, got.owner[b])
			if got.owner[b] != nil {
				assigned++
			}
		}
		require.Equal(t, refOwner, gotOwner, "step %d: the buckets' consumers", step)
		require.Equal(t, ref.inFlight(), got.inflightIn, "step %d: in flight per bucket", step)
		require.Equal(t, assigned, got.assigned, "step %d: assigned buckets", step)
		require.Equal(t, ids(ref.g.held), ids(got.held), "step %d: held", step)
		var heldIn [pinnedBuckets]int32
		for _, m := range got.held {
			heldIn[m.bucket]++
		}
		require.Equal(t, heldIn, got.heldIn, "step %d: held per bucket", step)
		if len(got.held) > 0 {
			heldSteps++
		}
	}
	require.Positive(t, heldSteps, "the steps never left a consumer full with messages held")
	require.Positive(t, busyMoves, "no join moved a bucket with messages in flight")
	t.Logf("%d joins, %d leaves, %d buckets with messages in flight moved, %d steps with messages held", joins, leaves, busyMoves, heldSteps)
}
