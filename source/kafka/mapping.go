package kafka

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/source/internal/envelope"
)

// Headers NewRecord sets and the default Mapping reads.
const (
	// HeaderVersion holds the aggregate version, a decimal integer ≥ 1.
	HeaderVersion = "Inorder-Version"
	// HeaderType holds the event type.
	HeaderType = "Inorder-Type"
	// HeaderID holds the event's stable id, when it is not the default
	// "<aggregate>:<version>".
	HeaderID = "Inorder-Id"
	// HeaderMetadata holds the event's metadata, compact JSON.
	HeaderMetadata = "Inorder-Metadata"
	// HeaderAggregate holds the aggregate id, for a Mapping that reads it
	// from a header rather than the key (NewRecord sets it too).
	HeaderAggregate = "Inorder-Aggregate"
)

// Mapping says where in a Kafka record each part of an inorder event is.
// Each field is a spec:
//
//	key           the record key
//	header:NAME   the value of header NAME (the first, if repeated)
//	field:PATH    a field of the JSON value: a top-level name, or a dotted
//	              path ("meta.version") into nested objects
//
// The same specs, with subject:N instead of key, map NATS messages (package
// source/nats). The zero value reads what NewRecord writes.
type Mapping struct {
	// Aggregate locates the aggregate id. Default "key": Kafka's default
	// partitioner sends every record of one key to one partition, which
	// keeps an aggregate's versions in order.
	Aggregate string
	// Version locates the version, a decimal integer ≥ 1 (a JSON number or
	// string in a field). Default "header:Inorder-Version".
	Version string
	// Type locates the event type. Default "header:Inorder-Type".
	Type string
	// ID locates the event's stable id; when the record has none, the id
	// is derived from the fact, "<aggregate>:<version>". Default
	// "header:Inorder-Id". Never map a value that differs between two
	// productions of one fact (an offset, a producer's random id).
	ID string
	// Metadata locates the event's JSON metadata (optional). Default
	// "header:Inorder-Metadata".
	Metadata string
}

// DefaultMapping is what the zero Mapping means.
var DefaultMapping = Mapping{
	Aggregate: "key",
	Version:   "header:" + HeaderVersion,
	Type:      "header:" + HeaderType,
	ID:        "header:" + HeaderID,
	Metadata:  "header:" + HeaderMetadata,
}

// mapping is a parsed Mapping.
type mapping struct{ envelope.Mapping }

func (m Mapping) parse() (*mapping, error) {
	kinds := []envelope.Kind{envelope.Key, envelope.Header, envelope.Field}
	var errs []error
	parse := func(what, spec, def string) envelope.Spec {
		s, err := envelope.Parse("kafka: Mapping."+what, cmp.Or(spec, def), kinds...)
		errs = append(errs, err)
		return s
	}
	pm := &mapping{envelope.Mapping{
		Aggregate: parse("Aggregate", m.Aggregate, DefaultMapping.Aggregate),
		Version:   parse("Version", m.Version, DefaultMapping.Version),
		Type:      parse("Type", m.Type, DefaultMapping.Type),
		ID:        parse("ID", m.ID, DefaultMapping.ID),
		Metadata:  parse("Metadata", m.Metadata, DefaultMapping.Metadata),
	}}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return pm, nil
}

// Map returns the inorder event of a record, and an
// *aggregate.ValidationError when the record cannot be one — no aggregate
// id, a missing or invalid version, a value that is not a JSON object where a
// field is mapped from it — with what is known in the event, for the
// rejected table. A value that is not JSON is otherwise mapped as it is: the
// processor's validation rejects it.
func (m Mapping) Map(r *kgo.Record) (aggregate.Event, error) {
	pm, err := m.parse()
	if err != nil {
		return aggregate.Event{}, err
	}
	return pm.event(r)
}

func (pm *mapping) event(r *kgo.Record) (aggregate.Event, error) {
	e, err := pm.Event(record{r}, r.Value)
	e.RecordedAt = r.Timestamp
	return e, err
}

// record answers a Mapping's key and header specs.
type record struct{ r *kgo.Record }

func (r record) Lookup(s envelope.Spec) (string, bool, string) {
	switch s.Kind {
	case envelope.Key:
		if r.r.Key == nil {
			return "", false, "the record has no key"
		}
		if !utf8.Valid(r.r.Key) {
			return "", false, "the record key is not UTF-8 text"
		}
		return string(r.r.Key), true, ""
	case envelope.Header:
		for _, h := range r.r.Headers {
			if h.Key == s.Name {
				return string(h.Value), true, ""
			}
		}
		return "", false, "header " + s.Name + " is missing"
	}
	return "", false, fmt.Sprintf("%s is not a Kafka spec", s)
}

// NewRecord returns a record of e for topic, as the default Mapping reads
// it: the aggregate id as the key (and header Inorder-Aggregate), the
// version, type, metadata and (when it is not the default) stable id in
// headers, the data as the value and RecordedAt, if set, as the timestamp.
// Produce it with a kgo.Client (ProduceSync); the default partitioner puts
// all the records of one aggregate in one partition.
func NewRecord(topic string, e aggregate.Event) *kgo.Record {
	r := &kgo.Record{
		Topic: topic,
		Key:   []byte(e.Aggregate),
		Value: e.Data,
		Headers: []kgo.RecordHeader{
			{Key: HeaderAggregate, Value: []byte(e.Aggregate)},
			{Key: HeaderVersion, Value: strconv.AppendInt(nil, e.Version, 10)},
			{Key: HeaderType, Value: []byte(e.Type)},
		},
		Timestamp: e.RecordedAt,
	}
	if e.ID != "" && e.ID != aggregate.DefaultID(e.Aggregate, e.Version) {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderID, Value: []byte(e.ID)})
	}
	if len(e.Metadata) > 0 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderMetadata, Value: e.Metadata})
	}
	return r
}
