// Package httpapi serves inorder's read models and operator status over a
// JSON HTTP API, and — behind an admin token of their own — the operator
// actions.
//
// [New] returns an [http.Handler] to mount on any server or mux; [NewServer]
// wraps a handler in an [http.Server] with sane timeouts:
//
//	h := httpapi.New(proc, &httpapi.Options{Token: os.Getenv("INORDER_TOKEN")})
//	srv := httpapi.NewServer(":8080", h)
//	go srv.ListenAndServe()
//	defer srv.Shutdown(ctx)
//
// A projection's read model is served when the projection implements
// [projection.Reader]; the others still appear in the listings and status.
//
// # Routes
//
// Only GET and HEAD are accepted (anything else is 405), but POST on the
// write routes. Every response is JSON.
//
//	GET /healthz                                  process alive: {"status":"ok"}
//	GET /readyz                                   database reachable (ping, 2 s): {"status":"ready"}, else 503
//	GET /v1/projections                           every projection: name, readable, filters, gate counts
//	GET /v1/projections/{name}                    one projection, same shape
//	GET /v1/projections/{name}/aggregates/{id}    one aggregate's read model ([AggregateResponse])
//	GET /v1/projections/{name}/aggregates         a page of read models ([ListResponse])
//	GET /v1/status                                lag, parked, quarantine, conflicts, rejected, effects ([StatusResponse])
//	POST /v1/actions/{action}                     an operator action: a dry run, or with "confirm": true the real one
//
// /healthz and /readyz never require the token; every other route does when
// [Options].Token is set (header "Authorization: Bearer <token>").
//
// # Write routes
//
// With [Options].AdminToken set, POST /v1/actions/{action} runs an operator
// action — retry, skip, declare-gap, replay, dismiss, ack, rebuild-start,
// rebuild-switch, rebuild-rollback, rebuild-drop, effects-retry, and on
// everything matching a filter bulk-retry, bulk-skip, bulk-dismiss,
// bulk-ack, bulk-effects-retry — with "Authorization: Bearer <AdminToken>"
// (the read token does not do; without an AdminToken the routes answer 403
// forbidden). The body is a JSON object of the action's fields; without
// "confirm": true the answer is a dry run that says what the action would
// touch (counts and the first rows) and changes nothing. A bulk confirmation
// passes back the preview's "as_of" and its count as "expect": only what
// matched then is acted on, and nothing if more match now (409). Every
// action is recorded in the operator log as done by "http:<actor>".
// docs/console.md lists the fields and answers. Extra codes: 403 forbidden,
// 409 conflict, 501 not_implemented.
//
// Aggregate ids are one path segment: escape "/" as %2F. Ids, cursors and
// filter values must be valid UTF-8 without NUL bytes, at most 512 bytes.
// Unknown query parameters, and parameters given twice, are rejected.
//
// # Reading your writes
//
// Every aggregate response carries the aggregate's applied version in the
// Inorder-Version header (and in the body): the read model and the version
// are read in one snapshot, so they always agree. A client that just appended
// version N of an aggregate asks for ?min_version=N: the request waits until
// the projection has applied version N — polling with backoff from 5 ms to
// 100 ms — for at most [Options].MaxWait, or the ?timeout= it gives (a Go
// duration such as "500ms", at most MaxWait: a longer one is refused with
// 400, not shortened behind the client's back). When the wait runs out the
// answer is 504 with code "timeout" and the current version:
//
//	{"error":{"code":"timeout","message":"...","current_version":3,"min_version":5}}
//
// 504 was chosen over 409: the request was valid and may succeed if retried,
// the server failed to get there in time.
//
// # Lists
//
// ?limit= (default 50, from 1 to 500: any other value is refused with 400) and
// ?after= (the previous page's "next") page through a projection's read
// models in aggregate id order; any other parameter is a filter, which must be
// one the projection declares (Reader.Filters), else 400.
//
// # Errors
//
// Errors have the shape {"error":{"code":"...","message":"..."}} ([ErrorBody])
// with one of these stable codes (the Code constants):
//
//	400 bad_request          malformed parameter, id, path or filter
//	400 bad_min_version      min_version not a non-negative 64-bit integer
//	401 unauthorized         missing or wrong bearer token
//	404 not_found            no such route, or no read model for the aggregate
//	404 unknown_projection   no projection of that name
//	404 no_reader            the projection does not serve its read model
//	405 method_not_allowed   not GET or HEAD
//	408 request_timeout      the request body did not arrive in time
//	413 payload_too_large    request body over Options.MaxBodyBytes
//	431 header_too_large     request headers over ServerMaxHeaderBytes (NewServer;
//	                         beyond ServerReadHeaderBytes net/http answers in text)
//	503 unavailable          database unreachable or too slow
//	504 timeout              min_version not reached in time
//	500 internal             anything else
//
// Messages never carry database errors or other internals (those are
// logged), nor echo the request's input.
package httpapi
