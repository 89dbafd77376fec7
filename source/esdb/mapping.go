package esdb

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/inorder/inorder/aggregate"
)

// ErrSkipped is wrapped by the error Mapping.Map returns for an event that is
// not for inorder: a system event ("$" stream or type), or an event of a
// stream outside Mapping.StreamPrefix. The source acknowledges such events
// without processing them and counts them in Stats.Skipped.
var ErrSkipped = errors.New("esdb: event skipped")

// Mapping turns EventStoreDB events into inorder events and back (aggregate
// id to stream name, for gap repair). The zero value maps a stream to an
// aggregate of the same name and revision r to version r+1.
type Mapping struct {
	// StreamPrefix is the category prefix removed from stream names to get
	// aggregate ids: with "payment-", stream "payment-42" is aggregate "42".
	// Streams without the prefix are skipped. Default "": the aggregate id is
	// the whole stream name.
	StreamPrefix string

	// VersionField, when set, names a top-level field of the event's
	// metadata JSON holding the aggregate version (a positive integer), for
	// streams whose revisions are not the aggregate's versions. An event
	// without a valid one is rejected. Default "": version = revision + 1.
	VersionField string
}

// Stream returns the stream name of an aggregate: StreamPrefix + aggregate.
func (m Mapping) Stream(aggregateID string) string { return m.StreamPrefix + aggregateID }

// Aggregate returns the aggregate id of a stream, and false if the stream
// does not belong to the mapping (it lacks StreamPrefix, or nothing follows
// it).
func (m Mapping) Aggregate(stream string) (string, bool) {
	id, ok := strings.CutPrefix(stream, m.StreamPrefix)
	return id, ok && id != ""
}

// Map returns the inorder event of a recorded event: aggregate from the
// stream name, version from the revision (or VersionField), the event's UUID
// as its stable id, its type, data, user metadata and creation time.
//
// The error wraps ErrSkipped for system events and streams outside the
// mapping. It is an *aggregate.ValidationError when the event cannot be
// processed — content that is not JSON, a missing version field — and the
// returned event then carries what is known, for the rejected table. The
// event carries the recorded content type (an empty one counts as JSON), so
// a replay of the rejected event is refused for the same reason. JSON
// content that is malformed is mapped as it is: the processor's validation
// rejects it.
func (m Mapping) Map(r *esdbc.RecordedEvent) (aggregate.Event, error) {
	if r == nil {
		return aggregate.Event{}, fmt.Errorf("%w: unresolved link", ErrSkipped)
	}
	if strings.HasPrefix(r.StreamID, "$") || strings.HasPrefix(r.EventType, "$") {
		return aggregate.Event{}, fmt.Errorf("%w: system event %s in %s", ErrSkipped, r.EventType, r.StreamID)
	}
	id, ok := m.Aggregate(r.StreamID)
	if !ok {
		return aggregate.Event{}, fmt.Errorf("%w: stream %s is outside prefix %q", ErrSkipped, r.StreamID, m.StreamPrefix)
	}
	e := aggregate.Event{
		ID:          r.EventID.String(),
		Aggregate:   id,
		Version:     int64(r.EventNumber) + 1,
		Type:        r.EventType,
		Data:        r.Data,
		RecordedAt:  r.CreatedDate,
		ContentType: r.ContentType,
	}
	if len(r.UserMetadata) > 0 {
		e.Metadata = r.UserMetadata
	}
	if e.ContentType != "" && !aggregate.IsJSONContentType(e.ContentType) {
		// What the processor's validation says of it, and says again when
		// an operator replays it: the event carries its content type.
		return e, e.Validate(&aggregate.Limits{MaxPayload: -1})
	}
	if m.VersionField != "" {
		v, err := versionFrom(e.Metadata, m.VersionField)
		if err != nil {
			e.Version = 0
			return e, err
		}
		e.Version = v
	}
	return e, nil
}

// versionFrom reads a positive integer version from a metadata field.
func versionFrom(meta []byte, field string) (int64, error) {
	bad := func(detail string) error {
		return &aggregate.ValidationError{Err: aggregate.ErrBadVersion, Detail: detail}
	}
	if len(bytes.TrimSpace(meta)) == 0 {
		return 0, bad(fmt.Sprintf("metadata has no version field %q", field))
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(meta, &fields); err != nil {
		return 0, bad(fmt.Sprintf("metadata is not a JSON object, so it has no version field %q", field))
	}
	raw, ok := fields[field]
	if !ok {
		return 0, bad(fmt.Sprintf("metadata has no version field %q", field))
	}
	s := strings.Trim(strings.TrimSpace(string(raw)), `"`)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 1 {
		return 0, bad(fmt.Sprintf("metadata version field %q is %s, not a positive integer", field, raw))
	}
	return v, nil
}
