package httpstatus

import (
	"cmp"
	"net/http"
)

// Recorder is an http.ResponseWriter that remembers the first status code
// written: by WriteHeader, or 200 by a Write before it.
type Recorder struct {
	http.ResponseWriter
	code int
}

// WriteHeader implements http.ResponseWriter.
func (r *Recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (r *Recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Wrote reports whether the status has been written.
func (r *Recorder) Wrote() bool { return r.code != 0 }

// Status returns the status code written, or 200 — what net/http sends —
// when nothing was.
func (r *Recorder) Status() int { return cmp.Or(r.code, http.StatusOK) }

// Unwrap lets http.ResponseController reach the connection.
func (r *Recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
