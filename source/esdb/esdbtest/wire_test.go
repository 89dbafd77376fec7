package esdbtest

import (
	"fmt"
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/persistent"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// The messages the server built for every event before it sent them
// pre-encoded: what the wire encoding must equal.

func refStreamsEvent(ev resolved, structured bool) *streams.ReadResp {
	return &streams.ReadResp{Content: &streams.ReadResp_Event{Event: &streams.ReadResp_ReadEvent{
		Event:    streamsRecorded(ev.event, structured),
		Link:     streamsRecorded(ev.link, structured),
		Position: &streams.ReadResp_ReadEvent_CommitPosition{CommitPosition: ev.original().pos},
	}}}
}

func refPersistentRecorded(r *record, structured bool) *persistent.ReadResp_ReadEvent_RecordedEvent {
	if r == nil {
		return nil
	}
	return &persistent.ReadResp_ReadEvent_RecordedEvent{
		Id:               uuidToProto(r.id, structured),
		StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(r.stream)},
		StreamRevision:   r.revision,
		PreparePosition:  r.pos,
		CommitPosition:   r.pos,
		Metadata:         systemMetadata(r),
		CustomMetadata:   nonNil(r.meta),
		Data:             nonNil(r.data),
	}
}

func refPersistentEvent(ev resolved, retry int, structured bool) *persistent.ReadResp {
	return &persistent.ReadResp{Content: &persistent.ReadResp_Event{Event: &persistent.ReadResp_ReadEvent{
		Event:    refPersistentRecorded(ev.event, structured),
		Link:     refPersistentRecorded(ev.link, structured),
		Position: &persistent.ReadResp_ReadEvent_CommitPosition{CommitPosition: ev.original().pos},
		Count:    &persistent.ReadResp_ReadEvent_RetryCount{RetryCount: int32(retry)},
	}}}
}

func newBareServer() *Server {
	return &Server{streams: map[string]*streamState{}, nextPos: firstPosition, notify: make(chan struct{}), groups: map[string]*psGroup{}}
}

// requireWire checks that w is what the reference message encodes to (byte
// for byte, deterministic marshaling) and decodes back to it.
func requireWire(t *testing.T, want proto.Message, w wireMsg) {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
	require.NoError(t, err)
	require.Equal(t, b, []byte(w))
	got := want.ProtoReflect().New().Interface()
	require.NoError(t, proto.Unmarshal(w, got))
	require.True(t, proto.Equal(want, got), "decoded %v, want %v", got, want)
}

// TestEventWire checks the pre-encoded events against the messages they
// replace: plain events (empty payloads too), resolved and unresolvable
// links, a tombstone, both UUID forms, retry counts, and that a record's
// cached encoding does not leak into how links resolve later.
func TestEventWire(t *testing.T) {
	s := newBareServer()
	recs := s.writeLocked("orders-1", []proposed{
		{eventType: "Placed", contentType: contentTypeJSON, data: []byte(`{"n":1}`), meta: []byte(`{"m":1}`)},
		{eventType: "Empty"},
	})
	link := s.writeLocked("by-type", []proposed{{eventType: eventTypeLinkTo, data: []byte("0@orders-1")}})[0]
	tomb := s.writeTombstoneLocked("gone")

	check := func(ev resolved) {
		t.Helper()
		for _, structured := range []bool{false, true} {
			for range 2 { // the second time from the cache
				w, err := streamsEventWire(ev, structured)
				require.NoError(t, err)
				requireWire(t, refStreamsEvent(ev, structured), w)
				for _, retry := range []int{0, 3} {
					w, err := persistentEventWire(ev, retry, structured)
					require.NoError(t, err)
					requireWire(t, refPersistentEvent(ev, retry, structured), w)
				}
			}
		}
	}
	check(resolved{event: recs[0]})
	check(resolved{event: recs[1]})
	check(resolved{event: tomb})
	check(resolved{event: link})
	resolvedLink := s.resolveIfLocked(link, true)
	require.Equal(t, recs[0], resolvedLink.event)
	check(resolvedLink)

	// Truncating the target: the link no longer resolves, and the cached
	// encodings of both records still go out as they are.
	s.setTruncateBeforeLocked("orders-1", 1)
	unresolved := s.resolveIfLocked(link, true)
	require.Nil(t, unresolved.event)
	check(unresolved)
	w, err := streamsEventWire(unresolved, true)
	require.NoError(t, err)
	var resp streams.ReadResp
	require.NoError(t, proto.Unmarshal(w, &resp))
	require.Nil(t, resp.GetEvent().GetEvent())
	require.Equal(t, "by-type", string(resp.GetEvent().GetLink().GetStreamIdentifier().GetStreamName()))
}

// refPumpPinned is pumpPinned as it was before buckets were kept per
// message: every pump hashes every held message.
func refPumpPinned(g *psGroup, s *Server) {
	consumer := func(m *psMsg) *psConsumer {
		r := m.ev.event
		if r == nil {
			r = m.ev.link
		}
		h := uint64(14695981039346656037) // FNV-1a
		for i := 0; i < len(r.stream); i++ {
			h ^= uint64(r.stream[i])
			h *= 1099511628211
		}
		return g.consumers[int(h%pinnedBuckets)%len(g.consumers)]
	}
	kept := g.held[:0]
	for _, m := range g.held {
		if c := consumer(m); c.inflight < c.bufSize {
			g.deliver(s, c, m)
		} else {
			kept = append(kept, m)
		}
	}
	clear(g.held[len(kept):])
	g.held = kept
	for g.hasCapacity() && len(g.held) < pinnedHold {
		m := g.nextMessage(s)
		if m == nil {
			return
		}
		if c := consumer(m); c.inflight < c.bufSize {
			g.deliver(s, c, m)
		} else {
			g.held = append(g.held, m)
		}
	}
}

// TestPinnedMatchesReference runs a Pinned group and a reference one (the
// former algorithm) through the same random consumers joining and
// leaving, acks, retries and appends, and requires the same deliveries,
// in the same order, and the same held messages after every step.
func TestPinnedMatchesReference(t *testing.T) {
	s := newBareServer()
	write := func(n int) {
		for i := range n {
			s.writeLocked(fmt.Sprintf("acct-%d", (i*7+len(s.log))%37), []proposed{{eventType: "E"}})
		}
	}
	write(400)
	newGroup := func(key string) *psGroup {
		return &psGroup{
			key: key, stream: "$all", all: true,
			settings:    psSettings{strategy: strategyPinned, msgTimeout: 1 << 62, maxRetry: 1 << 20, maxCP: 1000},
			outstanding: map[uuid.UUID]*psMsg{}, byKey: map[uint64]bool{},
		}
	}
	ref, got := newGroup("ref"), newGroup("got")
	defer ref.stopTimers()
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
	inflight := func(g *psGroup, c *psConsumer) []*psMsg {
		var out []*psMsg
		for _, d := range sent[c] {
			if m := g.outstanding[d.id]; m != nil && m.consumer == c {
				out = append(out, m)
			}
		}
		return out
	}
	for step := range 3000 {
		switch op := rnd(10); {
		case op == 0 && len(got.consumers) < 4 || len(got.consumers) == 0:
			size := 1 + rnd(12)
			ref.consumers = append(ref.consumers, &psConsumer{bufSize: size, wake: make(chan struct{}, 1)})
			got.consumers = append(got.consumers, &psConsumer{bufSize: size, wake: make(chan struct{}, 1)})
		case op == 1 && len(got.consumers) > 1:
			i := rnd(len(got.consumers))
			ref.removeConsumer(s, ref.consumers[i])
			got.removeConsumer(s, got.consumers[i])
		case op == 2:
			write(1 + rnd(30))
		default: // finish some messages of one consumer, or of all: ack or retry
			first, end := 0, len(got.consumers)
			if op < 6 {
				first = rnd(end)
				end = first + 1
			}
			for i := first; i < end; i++ {
				rm, gm := inflight(ref, ref.consumers[i]), inflight(got, got.consumers[i])
				require.Equal(t, ids(rm), ids(gm), "step %d: in flight", step)
				for k := range rm {
					switch rnd(4) {
					case 0:
					case 1:
						ref.retryOrPark(s, rm[k])
						got.retryOrPark(s, gm[k])
					default:
						ref.complete(s, rm[k])
						got.complete(s, gm[k])
					}
				}
			}
		}
		refPumpPinned(ref, s)
		got.pump(s)
		require.Equal(t, len(ref.consumers), len(got.consumers))
		for i := range got.consumers {
			drain(ref.consumers[i])
			drain(got.consumers[i])
			require.Equal(t, sent[ref.consumers[i]], sent[got.consumers[i]], "step %d: consumer %d's deliveries", step, i)
		}
		require.Equal(t, ids(ref.held), ids(got.held), "step %d: held", step)
		var heldIn [pinnedBuckets]int32
		for _, m := range got.held {
			heldIn[m.bucket]++
		}
		require.Equal(t, heldIn, got.heldIn, "step %d: held per bucket", step)
	}
	require.NotEmpty(t, got.held, "the steps never left a consumer full with messages held")
}
