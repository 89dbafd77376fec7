package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/inorder/inorder/projection"
)

// The stable error codes (see the package documentation for their HTTP
// statuses).
const (
	CodeBadRequest        = "bad_request"
	CodeBadMinVersion     = "bad_min_version"
	CodeUnauthorized      = "unauthorized"
	CodeNotFound          = "not_found"
	CodeUnknownProjection = "unknown_projection"
	CodeNoReader          = "no_reader"
	CodeMethodNotAllowed  = "method_not_allowed"
	CodeRequestTimeout    = "request_timeout"
	CodePayloadTooLarge   = "payload_too_large"
	CodeUnavailable       = "unavailable"
	CodeTimeout           = "timeout"
	CodeInternal          = "internal"
)

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error describes a failed request.
type Error struct {
	// Code is one of the stable Code constants.
	Code string `json:"code"`
	// Message is for humans; it may change between releases.
	Message string `json:"message"`
	// CurrentVersion and MinVersion accompany code "timeout": the
	// aggregate's applied version when the wait ran out, and the version
	// asked for.
	CurrentVersion *int64 `json:"current_version,omitempty"`
	MinVersion     *int64 `json:"min_version,omitempty"`
}

// AggregateResponse is the body of GET /v1/projections/{name}/aggregates/{id}.
type AggregateResponse struct {
	Projection string `json:"projection"`
	Aggregate  string `json:"aggregate"`
	// Version is the aggregate's applied version, which Data reflects.
	Version int64 `json:"version"`
	// Data is the projection's read model of the aggregate (Reader.Get).
	Data any `json:"data"`
}

// ListResponse is the body of GET /v1/projections/{name}/aggregates.
type ListResponse struct {
	Projection string `json:"projection"`
	// Items are the page's read models (Reader.List), in aggregate id order.
	Items []any `json:"items"`
	// Next is the ?after= of the following page; absent on the last page.
	Next string `json:"next,omitempty"`
}

// ProjectionInfo describes one projection in GET /v1/projections.
type ProjectionInfo struct {
	projection.ProjectionStatus
	// Readable tells whether the projection serves its read model
	// (implements projection.Reader).
	Readable bool `json:"readable"`
	// Filters lists the list filters it accepts.
	Filters []string `json:"filters"`
}

// ProjectionsResponse is the body of GET /v1/projections.
type ProjectionsResponse struct {
	Projections []ProjectionInfo `json:"projections"`
}

// StatusResponse is the body of GET /v1/status.
type StatusResponse struct {
	// Time is when the status was taken.
	Time        time.Time          `json:"time"`
	Projections []ProjectionLag    `json:"projections"`
	Checkpoints []CheckpointStatus `json:"checkpoints"`
	Quarantined QuarantineSummary  `json:"quarantined"`
	Conflicts   ConflictSummary    `json:"conflicts"`
	Rejected    RejectedSummary    `json:"rejected"`
}

// ProjectionLag is a projection's gate state with the age of its oldest
// parked event.
type ProjectionLag struct {
	projection.ProjectionStatus
	// OldestParkedAgeSeconds is how long the oldest parked event has waited
	// (0 when none is parked).
	OldestParkedAgeSeconds float64 `json:"oldest_parked_age_seconds"`
}

// CheckpointStatus is a source's checkpoint and its age.
type CheckpointStatus struct {
	projection.Checkpoint
	// AgeSeconds is the time since the checkpoint was written: the
	// source's lag while events keep flowing.
	AgeSeconds float64 `json:"age_seconds"`
}

// QuarantineSummary counts quarantined events and lists the oldest.
type QuarantineSummary struct {
	Count   int64                        `json:"count"`
	Entries []projection.QuarantineEntry `json:"entries"`
}

// ConflictSummary counts recorded conflicts and lists the first.
type ConflictSummary struct {
	Count   int64                      `json:"count"`
	Entries []projection.ConflictEntry `json:"entries"`
}

// RejectedSummary counts rejected deliveries (Pending: never replayed) and
// lists the first.
type RejectedSummary struct {
	Count   int64                      `json:"count"`
	Pending int64                      `json:"pending"`
	Entries []projection.RejectedEntry `json:"entries"`
}

// writeJSON writes v with status. v is marshalled first, so a value that
// cannot be encoded is a clean 500; the marshalling error is returned.
func writeJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(ErrorBody{Error{Code: CodeInternal, Message: "internal error"}})
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
	return err
}

func writeError(w http.ResponseWriter, status int, code, message string) {
	_ = writeJSON(w, status, ErrorBody{Error{Code: code, Message: message}})
}
