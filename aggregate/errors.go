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
)

// ValidationError is returned by Event.Validate. Err is one of the sentinel
// errors of this package; Detail says what was wrong with this event.
type ValidationError struct {
	Err    error
	Detail string
}

// Error implements error.
func (e *ValidationError) Error() string { return "invalid event: " + e.Detail }

// Unwrap returns the sentinel error.
func (e *ValidationError) Unwrap() error { return e.Err }

// Reason returns a stable, machine-readable code for the error:
// "empty_aggregate", "bad_version", "empty_type", "invalid_json",
// "invalid_metadata", "payload_too_large", "unknown_type" or "invalid".
func (e *ValidationError) Reason() string { return Reason(e) }

// Reason returns the stable code of a validation error (see
// ValidationError.Reason), or "invalid" for any other error.
func Reason(err error) string {
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
	}
	return "invalid"
}
