package httpapi

import (
	"net/http"
	"strconv"
	"time"
)

// Timeouts of NewServer's servers.
const (
	// ServerReadHeaderTimeout bounds reading a request's headers (slow
	// clients holding connections open).
	ServerReadHeaderTimeout = 5 * time.Second
	// ServerReadTimeout bounds reading a whole request, body included.
	ServerReadTimeout = 15 * time.Second
	// ServerWriteTimeout bounds a request from the end of its headers to the
	// end of its response; it exceeds the longest min_version wait
	// (MaxMaxWait) plus DefaultRequestTimeout.
	ServerWriteTimeout = 60 * time.Second
	// ServerIdleTimeout closes idle keep-alive connections.
	ServerIdleTimeout = 2 * time.Minute
	// ServerMaxHeaderBytes caps a request's headers: a request over it is
	// answered 431 with the JSON error envelope (code
	// "header_too_large").
	ServerMaxHeaderBytes = 64 << 10
	// ServerReadHeaderBytes is how much header the server reads at most
	// before it stops reading (http.Server.MaxHeaderBytes): above
	// ServerMaxHeaderBytes, so that a request up to this size gets the
	// JSON answer. A larger one gets net/http's own plain-text 431: the
	// server does not read what it refuses to parse.
	ServerReadHeaderBytes = 16 * ServerMaxHeaderBytes
)

// NewServer returns an http.Server for h on addr with the Server* timeouts
// and header limit (enforced by LimitHeaders). Adjust its fields before
// serving if needed (ErrorLog, TLSConfig, BaseContext…); call
// ListenAndServe, and Shutdown to stop.
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           LimitHeaders(h, ServerMaxHeaderBytes),
		ReadHeaderTimeout: ServerReadHeaderTimeout,
		ReadTimeout:       ServerReadTimeout,
		WriteTimeout:      ServerWriteTimeout,
		IdleTimeout:       ServerIdleTimeout,
		MaxHeaderBytes:    ServerReadHeaderBytes,
	}
}

// LimitHeaders answers 431 Request Header Fields Too Large, with the JSON
// error envelope, to a request whose request line and headers (counted as
// net/http counts them: name, value and separators per line) exceed max
// bytes, and passes the others to h.
func LimitHeaders(h http.Handler, max int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
		for k, vs := range r.Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
		if r.Host != "" && r.Header.Get("Host") == "" {
			n += len("Host") + len(r.Host) + 4
		}
		if n > max {
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusRequestHeaderFieldsTooLarge, CodeHeaderTooLarge,
				"the request's headers are over the limit of "+strconv.Itoa(max)+" bytes")
			return
		}
		h.ServeHTTP(w, r)
	})
}
