package esdbtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Event is an event to seed with [Server.Append].
type Event struct {
	// ID is the event id; a random one is generated when zero.
	ID uuid.UUID
	// Type is the event type (required).
	Type string
	// ContentType defaults to "application/json".
	ContentType string
	// Data is the event payload.
	Data []byte
	// Metadata is the user (custom) metadata.
	Metadata []byte
}

const (
	contentTypeJSON   = "application/json"
	contentTypeBinary = "application/octet-stream"

	eventTypeMetadata      = "$metadata"
	eventTypeLinkTo        = "$>"
	eventTypeStreamDeleted = "$streamDeleted"

	// deletedStreamRevision is EventStoreDB's EventNumber.DeletedStream
	// (long.MaxValue): the $tb of a soft-deleted stream and the revision of
	// a tombstone record.
	deletedStreamRevision = math.MaxInt64

	// firstPosition is the log position of the first event. Like in a real
	// node it is not zero, so Position{0,0} is strictly before every event.
	firstPosition = 1024
)

// record is one immutable event in the log (its wire cache aside).
type record struct {
	id          uuid.UUID
	stream      string
	revision    uint64
	pos         uint64 // commit == prepare
	eventType   string
	contentType string
	created     int64 // .NET ticks (100 ns) since the Unix epoch
	data        []byte
	meta        []byte

	// wire caches the record's RecordedEvent encoding, by UUID form
	// (string, structured): see recordedWire.
	wire [2]atomic.Pointer[[]byte]
}

// streamState is the state of one stream.
type streamState struct {
	events     []*record // index == revision, truncated ones included
	tb         uint64    // truncate before: revisions < tb are not readable
	deleted    bool      // soft-deleted ($tb == long.MaxValue)
	tombstoned bool      // hard-deleted
}

// readable reports whether reads see the stream at all.
func (st *streamState) readable() bool {
	return st != nil && len(st.events) > 0 && !st.deleted && !st.tombstoned
}

// current returns the last revision, or -1 for "no stream".
func (st *streamState) current() int64 {
	if st == nil || len(st.events) == 0 {
		return -1
	}
	return int64(len(st.events) - 1)
}

// proposed is an event about to be written.
type proposed struct {
	id          uuid.UUID
	eventType   string
	contentType string
	data, meta  []byte
}

type expectKind int

const (
	expectAny expectKind = iota
	expectNoStream
	expectStreamExists
	expectRevision
)

type expectation struct {
	kind     expectKind
	revision uint64
}

// appendOutcome is the result of appendLocked.
type appendOutcome struct {
	wrong   bool  // wrong expected version
	current int64 // current revision (-1: no stream), for success and failure
	last    *record
}

var errStreamDeleted = errors.New("stream is deleted")

// streamDeletedError carries the stream name of a tombstoned stream.
type streamDeletedError struct{ stream string }

func (e *streamDeletedError) Error() string {
	return fmt.Sprintf("Event stream '%s' is deleted.", e.stream)
}

func (e *streamDeletedError) Unwrap() error { return errStreamDeleted }

func nowTicks() int64 { return time.Now().UnixNano() / 100 }

// appendLocked appends events to a stream honoring the expectation and
// EventStoreDB's idempotency rules. s.mu must be held.
func (s *Server) appendLocked(name string, exp expectation, events []proposed) (appendOutcome, error) {
	st := s.streams[name]
	if st != nil && st.tombstoned {
		return appendOutcome{}, &streamDeletedError{stream: name}
	}
	cur := st.current()
	softDeleted := st != nil && st.deleted

	if last, ok := idempotent(st, exp, events); ok {
		return appendOutcome{current: int64(last.revision), last: last}, nil
	}

	ok := false
	switch exp.kind {
	case expectAny:
		ok = true
	case expectNoStream:
		ok = cur == -1 || softDeleted
	case expectStreamExists:
		ok = cur >= 0 && !softDeleted
		if !ok {
			cur = -1
		}
	case expectRevision:
		ok = cur == int64(exp.revision)
	}
	if !ok {
		return appendOutcome{wrong: true, current: cur}, nil
	}
	if len(events) == 0 {
		return appendOutcome{current: cur}, nil
	}
	if softDeleted {
		// Writing to a soft-deleted stream "undeletes" it: the old events
		// stay truncated and numbering continues.
		meta, _ := json.Marshal(map[string]any{"$tb": len(st.events)})
		s.writeLocked(metastreamOf(name), []proposed{{
			id: uuid.New(), eventType: eventTypeMetadata, contentType: contentTypeJSON, data: meta,
		}})
	}
	recs := s.writeLocked(name, events)
	last := recs[len(recs)-1]
	return appendOutcome{current: int64(last.revision), last: last}, nil
}

// idempotent reports whether the append repeats a previous one (same ids at
// the same place), returning the last record of the earlier write.
func idempotent(st *streamState, exp expectation, events []proposed) (*record, bool) {
	if st == nil || len(events) == 0 || len(st.events) == 0 {
		return nil, false
	}
	start := -1
	switch exp.kind {
	case expectNoStream:
		start = 0
	case expectRevision:
		start = int(exp.revision) + 1
	case expectAny:
		for i := len(st.events) - 1; i >= 0; i-- {
			if st.events[i].id == events[0].id {
				start = i
				break
			}
		}
	default:
		return nil, false
	}
	if start < 0 || start+len(events) > len(st.events) {
		return nil, false
	}
	for i, ev := range events {
		if st.events[start+i].id != ev.id {
			return nil, false
		}
	}
	return st.events[start+len(events)-1], true
}

// writeLocked unconditionally writes events to the log. s.mu must be held.
func (s *Server) writeLocked(name string, events []proposed) []*record {
	st := s.streams[name]
	if st == nil {
		st = &streamState{}
		s.streams[name] = st
	}
	created := nowTicks()
	recs := make([]*record, 0, len(events))
	for _, ev := range events {
		r := &record{
			id:          ev.id,
			stream:      name,
			revision:    uint64(len(st.events)),
			pos:         s.nextPos,
			eventType:   ev.eventType,
			contentType: ev.contentType,
			created:     created,
			data:        ev.data,
			meta:        ev.meta,
		}
		if r.id == uuid.Nil {
			r.id = uuid.New()
		}
		if r.contentType == "" {
			r.contentType = contentTypeBinary
		}
		s.nextPos += recordSize(r)
		st.events = append(st.events, r)
		s.log = append(s.log, r)
		recs = append(recs, r)
		if r.eventType == eventTypeMetadata && strings.HasPrefix(name, "$$") {
			s.applyMetadataLocked(strings.TrimPrefix(name, "$$"), r.data)
		}
	}
	s.broadcastLocked()
	return recs
}

// writeTombstoneLocked appends a $streamDeleted record to $all (not to the
// stream; its revision is long.MaxValue like in EventStoreDB).
func (s *Server) writeTombstoneLocked(name string) *record {
	st := s.streams[name]
	if st == nil {
		st = &streamState{}
		s.streams[name] = st
	}
	st.tombstoned = true
	r := &record{
		id:          uuid.New(),
		stream:      name,
		revision:    deletedStreamRevision,
		pos:         s.nextPos,
		eventType:   eventTypeStreamDeleted,
		contentType: contentTypeBinary,
		created:     nowTicks(),
	}
	s.nextPos += recordSize(r)
	s.log = append(s.log, r)
	s.broadcastLocked()
	return r
}

// recordSize makes positions sparse and size dependent, as in a real
// transaction log, so nobody relies on "next position = position + 1".
func recordSize(r *record) uint64 {
	return uint64(96 + len(r.stream) + len(r.eventType) + len(r.data) + len(r.meta))
}

func (s *Server) broadcastLocked() {
	close(s.notify)
	s.notify = make(chan struct{})
}

// applyMetadataLocked honors $tb of a stream metadata event. Metadata events
// replace each other: a missing $tb means "not truncated".
func (s *Server) applyMetadataLocked(stream string, data []byte) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return
	}
	st := s.streams[stream]
	if st == nil {
		st = &streamState{}
		s.streams[stream] = st
	}
	st.tb, st.deleted = 0, false
	raw, ok := m["$tb"]
	if !ok {
		return
	}
	tb, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return
	}
	if tb >= deletedStreamRevision {
		st.deleted = true
		st.tb = uint64(len(st.events))
		return
	}
	st.tb = tb
}

func metastreamOf(stream string) string { return "$$" + stream }

// setTruncateBeforeLocked writes a $metadata event with the given $tb.
func (s *Server) setTruncateBeforeLocked(stream string, tb uint64) *record {
	meta, _ := json.Marshal(map[string]any{"$tb": tb})
	recs := s.writeLocked(metastreamOf(stream), []proposed{{
		id: uuid.New(), eventType: eventTypeMetadata, contentType: contentTypeJSON, data: meta,
	}})
	return recs[0]
}

// idxAfter returns the index of the first log record with pos > p.
func (s *Server) idxAfter(p uint64) int {
	return sort.Search(len(s.log), func(i int) bool { return s.log[i].pos > p })
}

// idxAtOrAfter returns the index of the first log record with pos >= p.
func (s *Server) idxAtOrAfter(p uint64) int {
	return sort.Search(len(s.log), func(i int) bool { return s.log[i].pos >= p })
}

// resolveLocked resolves a "$>" link record ("<revision>@<stream>") to its
// target, or nil if it cannot be resolved.
func (s *Server) resolveLocked(link *record) *record {
	if link.eventType != eventTypeLinkTo {
		return nil
	}
	revStr, stream, ok := strings.Cut(string(link.data), "@")
	if !ok {
		return nil
	}
	rev, err := strconv.ParseUint(revStr, 10, 64)
	if err != nil {
		return nil
	}
	st := s.streams[stream]
	if !st.readable() || rev < st.tb || rev >= uint64(len(st.events)) {
		return nil
	}
	return st.events[rev]
}

// resolved is an event as sent to clients: event plus optional link.
type resolved struct {
	event *record // nil for an unresolvable link
	link  *record
}

// original is the record whose id/position the client sees as original.
func (r resolved) original() *record {
	if r.link != nil {
		return r.link
	}
	return r.event
}

// resolveIfLocked returns the resolved form of r when resolveLinks is set.
func (s *Server) resolveIfLocked(r *record, resolveLinks bool) resolved {
	if !resolveLinks || r.eventType != eventTypeLinkTo {
		return resolved{event: r}
	}
	return resolved{event: s.resolveLocked(r), link: r}
}
