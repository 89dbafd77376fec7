package httpapi

import "net/http"

// SetOnWait installs a hook New's handler calls when a request starts
// waiting for its min_version. Call it before serving.
func SetOnWait(h http.Handler, f func()) { h.(*handler).onWait = f }
