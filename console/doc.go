// Package console is inorder's operator console: server-rendered pages, in
// the browser, over the processor's operator views and actions — every
// projection and generation with its lag, parked, quarantined, conflicts,
// rejected deliveries and effects, one aggregate's whole story, the rebuilds
// and the operator log — and the operator actions, each previewed (a dry
// run: what it would touch, counted, and the first rows) before an explicit
// confirmation.
//
// [New] returns an [http.Handler] to mount under Options.Prefix (default
// "/console/") on the server that serves the HTTP API — `inorder serve` and
// `inorder run` do so with --console:
//
//	mux.Handle("/console/", console.New(proc, &console.Options{
//		Token:      readToken,  // the HTTP API's read token, "" for none
//		AdminToken: adminToken, // actions need it; "" makes the console read-only
//	}))
//
// The pages are html/template (everything an event carries is escaped) with
// a little JavaScript of its own (embedded; no CDN): polling refreshes the
// overview and the rebuild page. The console adds no listener.
//
// # Security
//
//   - Reads need the read token (Options.Token) when it is set; actions need
//     the admin token (Options.AdminToken), always: without one the console
//     is read-only. Tokens are given once, on the login page (a POST, never
//     in a query string), compared in constant time, and traded for an
//     HttpOnly, SameSite=Strict session cookie signed with a key derived from
//     both tokens (changing a token ends every session), valid SessionTTL.
//   - Every POST must come from the console's own origin (Origin, else
//     Sec-Fetch-Site) and carry the session's form token.
//   - Payloads (data and metadata) are masked — never read from the database
//     — unless Options.ShowPayloads is set; shown, they are text.
//   - The pages send a Content-Security-Policy that allows only the
//     console's own script and style (no inline script), frame-ancestors
//     'none', and no-store caching.
package console
