package esdbtest

import (
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/persistent"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
)

// filter is a server-side $all filter (stream name or event type, by
// prefixes or an unanchored regex, like EventStoreDB).
type filter struct {
	eventType bool
	prefixes  []string
	re        *regexp.Regexp
}

func newFilter(eventType bool, regex string, prefixes []string) (*filter, error) {
	f := &filter{eventType: eventType, prefixes: prefixes}
	if regex != "" {
		re, err := regexp.Compile(regex)
		if err != nil {
			return nil, fmt.Errorf("invalid filter regex %q: %w", regex, err)
		}
		f.re = re
	}
	return f, nil
}

func (f *filter) match(r *record) bool {
	if f == nil {
		return true
	}
	v := r.stream
	if f.eventType {
		v = r.eventType
	}
	if f.re != nil {
		return f.re.MatchString(v)
	}
	if len(f.prefixes) == 0 {
		return true
	}
	for _, p := range f.prefixes {
		if strings.HasPrefix(v, p) {
			return true
		}
	}
	return false
}

// readFilter converts the filter of a Streams.Read request. It returns the
// filter and the checkpoint interval (window * multiplier).
func readFilter(fo *streams.ReadReq_Options_FilterOptions) (*filter, int, error) {
	if fo == nil {
		return nil, 0, nil
	}
	var f *filter
	var err error
	switch {
	case fo.GetStreamIdentifier() != nil:
		e := fo.GetStreamIdentifier()
		f, err = newFilter(false, e.GetRegex(), e.GetPrefix())
	case fo.GetEventType() != nil:
		e := fo.GetEventType()
		f, err = newFilter(true, e.GetRegex(), e.GetPrefix())
	}
	if err != nil {
		return nil, 0, err
	}
	window := 32
	if w, ok := fo.GetWindow().(*streams.ReadReq_Options_FilterOptions_Max); ok && w.Max > 0 {
		window = int(w.Max)
	}
	mult := int(fo.GetCheckpointIntervalMultiplier())
	if mult <= 0 {
		mult = 1
	}
	return f, window * mult, nil
}

func persistentFilter(fo *persistent.CreateReq_AllOptions_FilterOptions) (*filter, error) {
	if fo == nil {
		return nil, nil
	}
	switch {
	case fo.GetStreamIdentifier() != nil:
		e := fo.GetStreamIdentifier()
		return newFilter(false, e.GetRegex(), e.GetPrefix())
	case fo.GetEventType() != nil:
		e := fo.GetEventType()
		return newFilter(true, e.GetRegex(), e.GetPrefix())
	}
	return nil, nil
}

// protoToUUID decodes a shared.UUID (structured or string form).
func protoToUUID(id *shared.UUID) (uuid.UUID, error) {
	if id == nil {
		return uuid.Nil, nil
	}
	if st := id.GetStructured(); st != nil {
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], uint64(st.GetMostSignificantBits()))
		binary.BigEndian.PutUint64(b[8:], uint64(st.GetLeastSignificantBits()))
		return uuid.UUID(b), nil
	}
	if s := id.GetString_(); s != "" {
		return uuid.Parse(s)
	}
	return uuid.Nil, nil
}

func uuidToProto(id uuid.UUID, structured bool) *shared.UUID {
	if !structured {
		return &shared.UUID{Value: &shared.UUID_String_{String_: id.String()}}
	}
	return &shared.UUID{Value: &shared.UUID_Structured_{Structured: &shared.UUID_Structured{
		MostSignificantBits:  int64(binary.BigEndian.Uint64(id[:8])),
		LeastSignificantBits: int64(binary.BigEndian.Uint64(id[8:])),
	}}}
}

// systemMetadata is what the client needs in RecordedEvent.metadata; it
// calls log.Fatalf when "created" is not an integer.
func systemMetadata(r *record) map[string]string {
	return map[string]string{
		"type":         r.eventType,
		"content-type": r.contentType,
		"created":      strconv.FormatInt(r.created, 10),
	}
}

// streamsRecorded is r as a RecordedEvent message. Streams and persistent
// subscriptions share its wire format (see recordedWire).
func streamsRecorded(r *record, structured bool) *streams.ReadResp_ReadEvent_RecordedEvent {
	if r == nil {
		return nil
	}
	return &streams.ReadResp_ReadEvent_RecordedEvent{
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

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
