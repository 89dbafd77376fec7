package aggregate

import "errors"

// Sentinel errors wrapped by *ValidationError. Compare with errors.Is.
var (
	// ErrEmptyAggregate reports an event without an aggregate id.
	ErrEmptyAggregate = errors.New("empty aggregate id")
	// ErrBadVersion reports a version below 1.
	ErrBadVersion = errors.New("version below 1")
	// ErrEmptyType reports an event without a type.
	ErrEmptyType = errors.New("empty event type")
	// ErrInvalidJSON reports data that is not valid JSON.
	ErrInvalidJSON = errors.New("data is not valid JSON")
	// ErrInvalidMetadata reports metadata that is not valid JSON.
	ErrInvalidMetadata = errors.New("metadata is not valid JSON")
	// ErrPayloadTooLarge reports data plus metadata over Limits.MaxPayload.
	ErrPayloadTooLarge = errors.New("payload too large")
	// ErrUnknownType reports a type outside Limits.Types.
	ErrUnknownType = errors.New("unknown event type")
	// ErrInvalidText reports an aggregate id, event id or type that is not
	// valid UTF-8 or holds a NUL byte.
	ErrInvalidText = errors.New("invalid text")
	// ErrTooLong reports an aggregate id, event id or type over its length
	// limit (Limits).
	ErrTooLong = errors.New("too long")
)

// ValidationError is returned by Event.Validate. Err is the sentinel error
// of the first problem found, Detail says what was wrong with this event,
// and Problems holds the sentinels of every problem found, Err first.
type ValidationError struct {
	Err      error
	Detail   string
	Problems []error
}

// add records a problem.
func (e *ValidationError) add(sentinel error, detail string) {
	if e.Err == nil {
		e.Err, e.Detail = sentinel, detail
	} else {
		e.Detail += "; " + detail
	}
	e.Problems = append(e.Problems, sentinel)
}

// Error implements error.
func (e *ValidationError) Error() string { return "invalid event: " + e.Detail }

// Unwrap returns the sentinels of every problem (Err alone when Problems is
// empty), so errors.Is matches any of them.
func (e *ValidationError) Unwrap() []error {
	if len(e.Problems) == 0 {
		return []error{e.Err}
	}
	return e.Problems
}

// Reason returns a stable, machine-readable code for the error's first
// problem: "empty_aggregate", "bad_version", "empty_type", "invalid_json",
// "invalid_metadata", "payload_too_large", "unknown_type", "invalid_text",
// "too_long" or "invalid".
func (e *ValidationError) Reason() string { return reason(e.Err) }

// Reason returns the stable code of a validation error (see
// ValidationError.Reason: its first problem), or "invalid" for any other
// error.
func Reason(err error) string {
	var v *ValidationError
	if errors.As(err, &v) {
		return v.Reason()
	}
	return reason(err)
}

func reason(err error) string {
	switch {
	case errors.Is(err, ErrEmptyAggregate):
		return "empty_aggregate"
	case errors.Is(err, ErrBadVersion):
		return "bad_version"
	case errors.Is(err, ErrEmptyType):
		return "empty_type"
	case errors.Is(err, ErrInvalidJSON):
		return "invalid_json"
	case errors.Is(err, ErrInvalidMetadata):
		return "invalid_metadata"
	case errors.Is(err, ErrPayloadTooLarge):
		return "payload_too_large"
	case errors.Is(err, ErrUnknownType):
		return "unknown_type"
	case errors.Is(err, ErrInvalidText):
		return "invalid_text"
	case errors.Is(err, ErrTooLong):
		return "too_long"
	}
	return "invalid"
}
