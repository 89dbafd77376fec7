package aggregate

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"mime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
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

	// ContentType is the media type the source gives for Data, if it
	// gives one (EventStoreDB's content type, a message's content-type
	// header). Empty means JSON. Validate rejects a type that is not JSON
	// — application/json or a "+json" type, parameters ignored — with
	// ErrInvalidJSON, whatever Data holds. It is not part of the payload
	// hash.
	ContentType string
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

// IsJSONContentType reports whether a media type is JSON: application/json
// or a "+json" type, parameters ignored.
func IsJSONContentType(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// Default limits of Limits.
const (
	// DefaultMaxPayload is the default limit on an event's data plus
	// metadata: 1 MiB.
	DefaultMaxPayload = 1 << 20
	// DefaultMaxAggregateLen is the default limit on an aggregate id, in
	// bytes.
	DefaultMaxAggregateLen = 512
	// DefaultMaxIDLen is the default limit on an event id, in bytes.
	DefaultMaxIDLen = 512
	// DefaultMaxTypeLen is the default limit on an event type, in bytes.
	DefaultMaxTypeLen = 256
	// MaxKeyLen caps MaxAggregateLen and MaxIDLen, MaxTypeLen and the
	// processor's projection names: PostgreSQL indexes the gate's keys —
	// (projection, aggregate, version, event id, payload hash) for
	// conflicts — and a B-tree entry must fit in about 2,700 bytes, which
	// incompressible text of 1,024 + 1,024 + 128 bytes and the fixed part
	// do.
	MaxKeyLen = 1024
)

// Limits configures validation. The zero value is valid and applies the
// defaults (DefaultMaxPayload, DefaultMaxAggregateLen, DefaultMaxIDLen,
// DefaultMaxTypeLen) and accepts every type.
type Limits struct {
	// MaxPayload is the largest accepted len(Data)+len(Metadata) in bytes.
	// Zero means DefaultMaxPayload; a negative value disables the check.
	MaxPayload int

	// MaxAggregateLen, MaxIDLen and MaxTypeLen are the longest accepted
	// aggregate id, event id (the stable id, default or not) and type, in
	// bytes. Zero means the default; at most MaxKeyLen.
	MaxAggregateLen, MaxIDLen, MaxTypeLen int

	// Types, when non-empty, lists the accepted event types; any other type
	// is rejected with ErrUnknownType.
	Types []string
}

// Check reports limits that PostgreSQL's indexes cannot honour: a length
// limit above MaxKeyLen, or a negative one.
func (l *Limits) Check() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxAggregateLen", l.MaxAggregateLen}, {"MaxIDLen", l.MaxIDLen}, {"MaxTypeLen", l.MaxTypeLen}} {
		if f.v < 0 || f.v > MaxKeyLen {
			return fmt.Errorf("aggregate: Limits.%s is %d; it must be between 0 (the default) and %d", f.name, f.v, MaxKeyLen)
		}
	}
	return nil
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return min(v, MaxKeyLen)
}

// Validate checks the envelope and returns nil or a *ValidationError listing
// every problem found, in this order: the aggregate id, the version, the
// event id, the type, the payload's size, the type's acceptance, the data,
// the metadata. Its Err is the first problem's sentinel; errors.Is matches
// any of them. A nil *Limits is the zero Limits.
//
// Text fields must be valid UTF-8 without NUL bytes, which PostgreSQL's
// text cannot store.
func (e Event) Validate(l *Limits) error {
	if l == nil {
		l = &Limits{}
	}
	var v ValidationError
	text := func(what, s string, max int) {
		switch {
		case len(s) > max:
			v.add(ErrTooLong, fmt.Sprintf("the %s is %d bytes long, over the limit of %d", what, len(s), max))
		case !utf8.ValidString(s):
			v.add(ErrInvalidText, fmt.Sprintf("the %s is not valid UTF-8", what))
		case strings.IndexByte(s, 0) >= 0:
			v.add(ErrInvalidText, fmt.Sprintf("the %s holds a NUL byte", what))
		}
	}
	if e.Aggregate == "" {
		v.add(ErrEmptyAggregate, "the aggregate id is empty")
	} else {
		text("aggregate id", e.Aggregate, orDefault(l.MaxAggregateLen, DefaultMaxAggregateLen))
	}
	if e.Version < 1 {
		v.add(ErrBadVersion, fmt.Sprintf("version %d is below 1", e.Version))
	}
	if e.ID != "" { // the default id is as safe as the aggregate id
		text("event id", e.ID, orDefault(l.MaxIDLen, DefaultMaxIDLen))
	}
	if e.Type == "" {
		v.add(ErrEmptyType, "the event type is empty")
	} else {
		text("event type", e.Type, orDefault(l.MaxTypeLen, DefaultMaxTypeLen))
	}
	max := l.MaxPayload
	if max == 0 {
		max = DefaultMaxPayload
	}
	if size := len(e.Data) + len(e.Metadata); max > 0 && size > max {
		v.add(ErrPayloadTooLarge, fmt.Sprintf("payload of %d bytes exceeds the limit of %d", size, max))
	}
	if e.Type != "" && len(l.Types) > 0 && !slices.Contains(l.Types, e.Type) {
		v.add(ErrUnknownType, fmt.Sprintf("type %q is not accepted", e.Type))
	}
	switch {
	case e.ContentType != "" && !IsJSONContentType(e.ContentType):
		v.add(ErrInvalidJSON, fmt.Sprintf("content type %s is not JSON", e.ContentType))
	case len(bytes.TrimSpace(e.Data)) == 0 || !json.Valid(e.Data):
		v.add(ErrInvalidJSON, "data is not valid JSON")
	}
	if len(e.Metadata) > 0 && !json.Valid(e.Metadata) {
		v.add(ErrInvalidMetadata, "metadata is not valid JSON")
	}
	if v.Err == nil {
		return nil
	}
	out := v // v itself stays on the stack: valid events allocate nothing here
	return &out
}
