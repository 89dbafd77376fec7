package nats

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	natsc "github.com/nats-io/nats.go"

	"github.com/inorder/inorder/aggregate"
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

// where is a parsed spec.
type where struct {
	spec   string
	header string   // header:NAME
	path   []string // field:PATH
	token  int      // subject:N (0: not a token)
	whole  bool     // subject
}

func parseWhere(what, spec string, allowWhole bool) (where, error) {
	w := where{spec: spec}
	kind, arg, _ := strings.Cut(spec, ":")
	switch {
	case kind == "header" && arg != "":
		w.header = arg
	case kind == "field" && arg != "":
		w.path = strings.Split(arg, ".")
		for _, p := range w.path {
			if p == "" {
				return w, fmt.Errorf("nats: Mapping.%s %q: an empty name in the field path", what, spec)
			}
		}
	case kind == "subject" && arg != "":
		n, err := strconv.Atoi(arg)
		if err != nil || n == 0 {
			return w, fmt.Errorf("nats: Mapping.%s %q: subject:N needs a non-zero token number", what, spec)
		}
		w.token = n
	case spec == "subject" && allowWhole:
		w.whole = true
	default:
		forms := "header:NAME, field:PATH or subject:N"
		if allowWhole {
			forms += " or subject"
		}
		return w, fmt.Errorf("nats: Mapping.%s %q: want %s", what, spec, forms)
	}
	return w, nil
}

// mapping is a parsed Mapping.
type mapping struct {
	agg, ver, typ, id, meta where
	payload                 bool // some spec reads the payload
}

func (m Mapping) parse() (*mapping, error) {
	or := func(v, d string) string {
		if v == "" {
			return d
		}
		return v
	}
	var pm mapping
	var errs []error
	parse := func(dst *where, what, spec string, whole bool) {
		w, err := parseWhere(what, spec, whole)
		errs = append(errs, err)
		*dst = w
		pm.payload = pm.payload || w.path != nil
	}
	parse(&pm.agg, "Aggregate", or(m.Aggregate, DefaultMapping.Aggregate), false)
	parse(&pm.ver, "Version", or(m.Version, DefaultMapping.Version), false)
	parse(&pm.typ, "Type", or(m.Type, DefaultMapping.Type), true)
	parse(&pm.id, "ID", or(m.ID, DefaultMapping.ID), false)
	parse(&pm.meta, "Metadata", or(m.Metadata, DefaultMapping.Metadata), false)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &pm, nil
}

// Map returns the inorder event of a message's subject, headers and data,
// and an *aggregate.ValidationError when the message cannot be one — no
// aggregate id, a missing or invalid version, a payload that is not JSON
// where a field is mapped from it — with what is known in the event, for the
// rejected table. A payload that is not JSON is otherwise mapped as it is:
// the processor's validation rejects it.
func (m Mapping) Map(subject string, h natsc.Header, data []byte) (aggregate.Event, error) {
	pm, err := m.parse()
	if err != nil {
		return aggregate.Event{}, err
	}
	return pm.event(subject, h, data)
}

func (pm *mapping) event(subject string, h natsc.Header, data []byte) (aggregate.Event, error) {
	e := aggregate.Event{Data: data}
	var fields map[string]json.RawMessage
	var payloadErr error
	if pm.payload {
		if err := json.Unmarshal(data, &fields); err != nil {
			payloadErr = err
		}
	}
	var v aggregate.ValidationError
	var problems []string
	fail := func(sentinel error, detail string) {
		if v.Err == nil {
			v.Err = sentinel
		}
		v.Problems = append(v.Problems, sentinel)
		problems = append(problems, detail)
	}
	get := func(w where) (string, bool, string) {
		switch {
		case w.header != "":
			vals := h[w.header]
			if len(vals) == 0 {
				return "", false, "header " + w.header + " is missing"
			}
			return vals[0], true, ""
		case w.path != nil:
			if payloadErr != nil {
				return "", false, "the payload is not a JSON object, so it has no field " + strings.Join(w.path, ".")
			}
			raw, ok := lookup(fields, w.path)
			if !ok {
				return "", false, "the payload has no field " + strings.Join(w.path, ".")
			}
			return scalar(raw), true, ""
		case w.whole:
			return subject, true, ""
		default:
			tok, ok := token(subject, w.token)
			if !ok {
				return "", false, fmt.Sprintf("subject %s has no token %d", subject, w.token)
			}
			return tok, true, ""
		}
	}
	if s, ok, why := get(pm.agg); ok && s != "" {
		e.Aggregate = s
	} else {
		fail(aggregate.ErrEmptyAggregate, cmpOr(why, pm.agg.spec+" is empty"))
	}
	if s, ok, why := get(pm.ver); !ok {
		fail(aggregate.ErrBadVersion, why)
	} else if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err != nil || n < 1 {
		fail(aggregate.ErrBadVersion, fmt.Sprintf("%s is %q, not an integer ≥ 1", pm.ver.spec, s))
	} else {
		e.Version = n
	}
	if s, ok, _ := get(pm.typ); ok {
		e.Type = s // an empty or missing type is the processor's to reject
	}
	if s, ok, _ := get(pm.id); ok {
		e.ID = s
	}
	if s, ok, _ := get(pm.meta); ok && s != "" {
		e.Metadata = []byte(s)
	}
	if v.Err != nil {
		if payloadErr != nil {
			fail(aggregate.ErrInvalidJSON, "data is not valid JSON")
		}
		v.Detail = strings.Join(problems, "; ")
		return e, &v
	}
	return e, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// lookup follows a dotted path into a JSON object.
func lookup(fields map[string]json.RawMessage, path []string) (json.RawMessage, bool) {
	raw, ok := fields[path[0]]
	for _, p := range path[1:] {
		if !ok {
			return nil, false
		}
		var inner map[string]json.RawMessage
		if json.Unmarshal(raw, &inner) != nil {
			return nil, false
		}
		raw, ok = inner[p]
	}
	return raw, ok
}

// scalar renders a JSON value as text: a string's contents, anything else as
// written.
func scalar(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	return string(raw)
}

// token returns the n-th token of a subject (1-based, negative from the
// end).
func token(subject string, n int) (string, bool) {
	toks := strings.Split(subject, ".")
	if n < 0 {
		n += len(toks) + 1
	}
	if n < 1 || n > len(toks) {
		return "", false
	}
	return toks[n-1], true
}
