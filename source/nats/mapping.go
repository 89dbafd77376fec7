package nats

import (
	"cmp"
	"errors"
	"fmt"

	natsc "github.com/nats-io/nats.go"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/source/internal/envelope"
)

// Headers the publishing helpers set and the default Mapping reads.
const (
	// HeaderAggregate holds the aggregate id.
	HeaderAggregate = "Inorder-Aggregate"
	// HeaderVersion holds the aggregate version, a decimal integer ≥ 1.
	HeaderVersion = "Inorder-Version"
	// HeaderType holds the event type.
	HeaderType = "Inorder-Type"
	// HeaderMetadata holds the event's metadata, compact JSON.
	HeaderMetadata = "Inorder-Metadata"
	// HeaderMsgID is JetStream's de-duplication header: a message whose id
	// the stream saw within its duplicate window is not stored again.
	HeaderMsgID = natsc.MsgIdHdr
)

// Mapping says where in a NATS message each part of an inorder event is.
// Each field is a spec:
//
//	header:NAME   the value of header NAME
//	field:PATH    a field of the JSON payload: a top-level name, or a
//	              dotted path ("meta.version") into nested objects
//	subject:N     the N-th token of the subject (1-based; negative counts
//	              from the end: -1 is the last)
//	subject       the whole subject (Type only)
//
// The zero value reads the headers the publishing helpers set.
type Mapping struct {
	// Aggregate locates the aggregate id. Default "header:Inorder-Aggregate".
	Aggregate string
	// Version locates the version, a decimal integer ≥ 1 (a JSON number or
	// string in a payload field). Default "header:Inorder-Version".
	Version string
	// Type locates the event type. Default "header:Inorder-Type".
	Type string
	// ID locates the event's stable id; when the message has none, the id is
	// derived from the fact: "<aggregate>:<version>". Default
	// "header:Nats-Msg-Id". Never map a value that differs between two
	// publishes of one fact.
	ID string
	// Metadata locates the event's JSON metadata (optional). Default
	// "header:Inorder-Metadata".
	Metadata string
}

// DefaultMapping is what the zero Mapping means.
var DefaultMapping = Mapping{
	Aggregate: "header:" + HeaderAggregate,
	Version:   "header:" + HeaderVersion,
	Type:      "header:" + HeaderType,
	ID:        "header:" + HeaderMsgID,
	Metadata:  "header:" + HeaderMetadata,
}

// mapping is a parsed Mapping.
type mapping struct{ envelope.Mapping }

func (m Mapping) parse() (*mapping, error) {
	var errs []error
	parse := func(what, spec, def string, kinds ...envelope.Kind) envelope.Spec {
		s, err := envelope.Parse("nats: Mapping."+what, cmp.Or(spec, def), append([]envelope.Kind{envelope.Header, envelope.Field, envelope.Token}, kinds...)...)
		errs = append(errs, err)
		return s
	}
	pm := &mapping{envelope.Mapping{
		Aggregate: parse("Aggregate", m.Aggregate, DefaultMapping.Aggregate),
		Version:   parse("Version", m.Version, DefaultMapping.Version),
		Type:      parse("Type", m.Type, DefaultMapping.Type, envelope.Subject),
		ID:        parse("ID", m.ID, DefaultMapping.ID),
		Metadata:  parse("Metadata", m.Metadata, DefaultMapping.Metadata),
	}}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return pm, nil
}

// Map returns the inorder event of a message's subject, headers and data,
// and an *aggregate.ValidationError when the message cannot be one — no
// aggregate id, a missing or invalid version, a payload that is not a JSON
// object where a field is mapped from it — with what is known in the event,
// for the rejected table. A payload that is not JSON is otherwise mapped as
// it is: the processor's validation rejects it.
func (m Mapping) Map(subject string, h natsc.Header, data []byte) (aggregate.Event, error) {
	pm, err := m.parse()
	if err != nil {
		return aggregate.Event{}, err
	}
	return pm.event(subject, h, data)
}

func (pm *mapping) event(subject string, h natsc.Header, data []byte) (aggregate.Event, error) {
	return pm.Event(message{subject, h}, data)
}

// message answers a Mapping's header and subject specs.
type message struct {
	subject string
	h       natsc.Header
}

func (m message) Lookup(s envelope.Spec) (string, bool, string) {
	switch s.Kind {
	case envelope.Header:
		vals := m.h[s.Name]
		if len(vals) == 0 {
			return "", false, "header " + s.Name + " is missing"
		}
		return vals[0], true, ""
	case envelope.Token:
		tok, ok := envelope.SubjectToken(m.subject, s.N)
		if !ok {
			return "", false, fmt.Sprintf("subject %s has no token %d", m.subject, s.N)
		}
		return tok, true, ""
	case envelope.Subject:
		return m.subject, true, ""
	}
	return "", false, fmt.Sprintf("%s is not a NATS spec", s)
}
