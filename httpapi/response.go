package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"

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
	CodeHeaderTooLarge    = "header_too_large"
	CodeUnavailable       = "unavailable"
	CodeTimeout           = "timeout"
	CodeInternal          = "internal"
	CodeForbidden         = "forbidden"
	CodeConflict          = "conflict"
	CodeNotImplemented    = "not_implemented"
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
