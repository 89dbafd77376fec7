package esdbtest

import (
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/persistent"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
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
