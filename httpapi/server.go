package httpapi

import (
	"net/http"
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
	// ServerMaxHeaderBytes caps a request's headers.
	ServerMaxHeaderBytes = 64 << 10
)

// NewServer returns an http.Server for h on addr with the Server* timeouts
// and header limit. Adjust its fields before serving if needed (ErrorLog,
// TLSConfig, BaseContext…); call ListenAndServe, and Shutdown to stop.
func NewServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ServerReadHeaderTimeout,
		ReadTimeout:       ServerReadTimeout,
		WriteTimeout:      ServerWriteTimeout,
		IdleTimeout:       ServerIdleTimeout,
		MaxHeaderBytes:    ServerMaxHeaderBytes,
	}
}
