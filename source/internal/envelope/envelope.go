package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/inorder/inorder/aggregate"
)

// Kind is the kind of a Spec.
type Kind int

// The kinds of Spec.
const (
	// None is the zero Spec: the part is not mapped.
	None Kind = iota
	// Header is header:NAME.
	Header
	// Field is field:PATH, a field of the JSON payload.
	Field
	// Key is key, the record key.
	Key
	// Token is subject:N, a token of the subject.
	Token
	// Subject is subject, the whole subject.
	Subject
)

var forms = map[Kind]string{Header: "header:NAME", Field: "field:PATH", Key: "key", Token: "subject:N", Subject: "subject"}

// Spec is a parsed spec: where in a message one part of an event is.
type Spec struct {
	// Text is the spec as written.
	Text string
	// Kind says which of the other fields are used.
	Kind Kind
	// Name is the header's name (Header).
	Name string
	// Path is the field's path (Field).
	Path []string
	// N is the token's number (Token).
	N int
}

// String returns the spec as written.
func (s Spec) String() string { return s.Text }

// Parse parses spec, which must be of one of the allowed kinds. what names
// the part in the error ("aggregate", "version"…).
func Parse(what, spec string, allowed ...Kind) (Spec, error) {
	s := Spec{Text: spec}
	kind, arg, hasArg := strings.Cut(spec, ":")
	switch {
	case kind == "header" && arg != "":
		s.Kind, s.Name = Header, arg
	case kind == "field" && arg != "":
		s.Kind, s.Path = Field, strings.Split(arg, ".")
		for _, p := range s.Path {
			if p == "" {
				return s, fmt.Errorf("%s %q: an empty name in the field path", what, spec)
			}
		}
	case kind == "key" && !hasArg:
		s.Kind = Key
	case kind == "subject" && arg != "":
		n, err := strconv.Atoi(arg)
		if err != nil || n == 0 {
			return s, fmt.Errorf("%s %q: subject:N needs a non-zero token number", what, spec)
		}
		s.Kind, s.N = Token, n
	case kind == "subject" && !hasArg:
		s.Kind = Subject
	}
	for _, k := range allowed {
		if s.Kind == k && k != None {
			return s, nil
		}
	}
	want := make([]string, 0, len(allowed))
	for _, k := range allowed {
		if f, ok := forms[k]; ok {
			want = append(want, f)
		}
	}
	return Spec{Text: spec}, fmt.Errorf("%s %q: want %s", what, spec, strings.Join(want, ", "))
}

// Mapping locates the parts of an event in a message. Aggregate and Version
// are required; Type, ID and Metadata may be the zero Spec (not mapped).
type Mapping struct {
	Aggregate, Version, Type, ID, Metadata Spec
}

// Message is a broker message as a Mapping reads it.
type Message interface {
	// Lookup returns the value the spec locates (never a Field spec: the
	// mapping reads the payload itself); when there is none, ok is false
	// and why says what is missing ("header Inorder-Version is missing").
	Lookup(s Spec) (value string, ok bool, why string)
}

// Event maps msg, whose payload is data, to an event. When the message
// cannot be one — no aggregate id, a missing or invalid version, a payload
// that is not a JSON object where a field is mapped from it — the error is
// an *aggregate.ValidationError, and the event holds what is known, for the
// rejected table. A payload that is not JSON is otherwise mapped as it is:
// the processor's validation rejects it.
func (m *Mapping) Event(msg Message, data []byte) (aggregate.Event, error) {
	e := aggregate.Event{Data: data}
	var fields map[string]json.RawMessage
	var payloadErr error
	parsed := false
	var v aggregate.ValidationError
	var problems []string
	fail := func(sentinel error, detail string) {
		if v.Err == nil {
			v.Err = sentinel
		}
		v.Problems = append(v.Problems, sentinel)
		problems = append(problems, detail)
	}
	get := func(s Spec) (string, bool, string) {
		switch s.Kind {
		case None:
			return "", false, "not mapped"
		case Field:
			if !parsed {
				parsed = true
				payloadErr = json.Unmarshal(data, &fields)
				if payloadErr == nil && fields == nil {
					payloadErr = errors.New("null")
				}
			}
			path := strings.Join(s.Path, ".")
			if payloadErr != nil {
				return "", false, "the payload is not a JSON object, so it has no field " + path
			}
			raw, ok := lookup(fields, s.Path)
			if !ok {
				return "", false, "the payload has no field " + path
			}
			return scalar(raw), true, ""
		default:
			return msg.Lookup(s)
		}
	}
	if s, ok, why := get(m.Aggregate); ok && s != "" {
		e.Aggregate = s
	} else {
		fail(aggregate.ErrEmptyAggregate, cmpOr(why, m.Aggregate.Text+" is empty"))
	}
	if s, ok, why := get(m.Version); !ok {
		fail(aggregate.ErrBadVersion, why)
	} else if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err != nil || n < 1 {
		fail(aggregate.ErrBadVersion, fmt.Sprintf("%s is %q, not an integer ≥ 1", m.Version.Text, s))
		if err == nil {
			e.Version = n // kept for the rejected table: version 0 and -2 are two bad events
		}
	} else {
		e.Version = n
	}
	if s, ok, _ := get(m.Type); ok {
		e.Type = s // an empty or missing type is the processor's to reject
	}
	if s, ok, _ := get(m.ID); ok {
		e.ID = s
	}
	if s, ok, _ := get(m.Metadata); ok && s != "" {
		e.Metadata = []byte(s)
	}
	if v.Err != nil {
		if payloadErr != nil && !json.Valid(data) {
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

// SubjectToken returns the n-th token of a subject (1-based, negative from
// the end): what a NATS source answers for a Token spec.
func SubjectToken(subject string, n int) (string, bool) {
	toks := strings.Split(subject, ".")
	if n < 0 {
		n += len(toks) + 1
	}
	if n < 1 || n > len(toks) {
		return "", false
	}
	return toks[n-1], true
}
