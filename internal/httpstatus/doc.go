// Package httpstatus records the status code an http.Handler writes, for
// the HTTP API's request log and panic handler (package httpapi) and the
// request metrics and spans around it (package internal/clikit).
package httpstatus
