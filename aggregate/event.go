package aggregate

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Event is the envelope of one fact about one aggregate.
type Event struct {
	// ID is the event's stable id, derived from the fact. When empty,
	// StableID returns "<Aggregate>:<Version>". A source may set its own
	// stable id (EventStoreDB's event UUID, for example), but never a random
	// id per delivery.
	ID string

	// Aggregate is the id of the aggregate (stream) the event belongs to.
	Aggregate string

	// Version is the event's 1-based position in its aggregate's stream.
	Version int64

	// Type names the event, for example "payment.captured".
	Type string

	// Data is the event's JSON payload.
	Data []byte

	// Metadata is optional JSON metadata. It is stored with the event but is
	// not part of its payload hash: two deliveries of the same fact may carry
	// different metadata.
	Metadata []byte

	// RecordedAt is when the source recorded the event, if it says.
	RecordedAt time.Time
}

// StableID returns e.ID, or "<aggregate>:<version>" when e.ID is empty.
func (e Event) StableID() string {
	if e.ID != "" {
		return e.ID
	}
	return DefaultID(e.Aggregate, e.Version)
}

// DefaultID returns the default stable id of an aggregate's version:
// "<aggregate>:<version>".
func DefaultID(aggregate string, version int64) string {
	return aggregate + ":" + strconv.FormatInt(version, 10)
}

// Hash returns the payload hash used to tell a redelivery (same hash) from a
// conflicting event (different hash): the first 16 bytes of the SHA-256 of
// the type and the data. Insignificant JSON whitespace is part of the data.
func (e Event) Hash() []byte {
	h := sha256.New()
	h.Write([]byte(e.Type))
	h.Write([]byte{0})
	h.Write(e.Data)
	return h.Sum(nil)[:16]
}

// New returns an event for aggregate at version with data marshalled to JSON
// and the default stable id.
func New(aggregate string, version int64, typ string, data any) (Event, error) {
	b, err := json.Marshal(data)
	if err != nil {
		return Event{}, fmt.Errorf("aggregate: marshal %s data: %w", typ, err)
	}
	return Event{Aggregate: aggregate, Version: version, Type: typ, Data: b}, nil
}

// DefaultMaxPayload is the default limit on an event's data plus metadata:
// 1 MiB.
const DefaultMaxPayload = 1 << 20

// Limits configures validation. The zero value is valid and applies
// DefaultMaxPayload and accepts every type.
type Limits struct {
	// MaxPayload is the largest accepted len(Data)+len(Metadata) in bytes.
	// Zero means DefaultMaxPayload; a negative value disables the check.
	MaxPayload int

	// Types, when non-empty, lists the accepted event types; any other type
	// is rejected with ErrUnknownType.
	Types []string
}

// Validate checks the envelope and returns nil or a *ValidationError wrapping
// the sentinel error of the first problem found. A nil *Limits is the zero
// Limits.
func (e Event) Validate(l *Limits) error {
	if l == nil {
		l = &Limits{}
	}
	switch {
	case e.Aggregate == "":
		return &ValidationError{Err: ErrEmptyAggregate, Detail: "the aggregate id is empty"}
	case e.Version < 1:
		return &ValidationError{Err: ErrBadVersion, Detail: fmt.Sprintf("version %d is below 1", e.Version)}
	case e.Type == "":
		return &ValidationError{Err: ErrEmptyType, Detail: "the event type is empty"}
	}
	max := l.MaxPayload
	if max == 0 {
		max = DefaultMaxPayload
	}
	if size := len(e.Data) + len(e.Metadata); max > 0 && size > max {
		return &ValidationError{Err: ErrPayloadTooLarge, Detail: fmt.Sprintf("payload of %d bytes exceeds the limit of %d", size, max)}
	}
	if len(l.Types) > 0 && !contains(l.Types, e.Type) {
		return &ValidationError{Err: ErrUnknownType, Detail: fmt.Sprintf("type %q is not accepted", e.Type)}
	}
	if len(bytes.TrimSpace(e.Data)) == 0 || !json.Valid(e.Data) {
		return &ValidationError{Err: ErrInvalidJSON, Detail: "data is not valid JSON"}
	}
	if len(e.Metadata) > 0 && !json.Valid(e.Metadata) {
		return &ValidationError{Err: ErrInvalidMetadata, Detail: "metadata is not valid JSON"}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
