package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/httpstatus"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// Defaults and limits of Options and of the API's parameters.
const (
	// DefaultMaxWait is Options.MaxWait's default.
	DefaultMaxWait = 5 * time.Second
	// MaxMaxWait caps Options.MaxWait.
	MaxMaxWait = 30 * time.Second
	// DefaultRequestTimeout is Options.RequestTimeout's default.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultMaxBodyBytes is Options.MaxBodyBytes's default.
	DefaultMaxBodyBytes = 8 << 10
	// DefaultLimit is the page size of a list without ?limit=.
	DefaultLimit = projection.DefaultReadLimit
	// MaxLimit caps ?limit=.
	MaxLimit = 500
	// MaxParamBytes is the longest accepted aggregate id, cursor or filter
	// value.
	MaxParamBytes = 512
	// VersionHeader carries the aggregate's applied version on every
	// aggregate response.
	VersionHeader = "Inorder-Version"

	readyTimeout = 2 * time.Second
	minBackoff   = 5 * time.Millisecond
	maxBackoff   = 100 * time.Millisecond
)

// Options configures New. A nil *Options is valid: every field has a
// default, which a zero or negative value also gets.
type Options struct {
	// Token, when set, is the bearer token every route but /healthz and
	// /readyz requires ("Authorization: Bearer <token>"), compared in
	// constant time. Default: no authentication.
	Token string

	// MaxWait bounds a ?min_version= wait. Default DefaultMaxWait (5 s);
	// values above MaxMaxWait (30 s) are lowered to it.
	MaxWait time.Duration

	// RequestTimeout bounds the database work of one request (a
	// min_version wait comes on top). Default DefaultRequestTimeout (10 s).
	RequestTimeout time.Duration

	// MaxBodyBytes is the largest request body accepted, and drained; the
	// API reads no body, so this only sheds abuse. Default
	// DefaultMaxBodyBytes (8 KiB).
	MaxBodyBytes int64

	// Logger receives request logs (debug) and internal errors (error).
	// Default: discarded.
	Logger *slog.Logger

	// Effects, if set, adds the open effect intents per kind to /v1/status
	// (an *effects.Client). Default: none.
	Effects EffectsStats

	// AdminToken, when set, enables the write routes (POST /v1/actions/…):
	// each needs "Authorization: Bearer <AdminToken>" — the read token does
	// not do — compared in constant time. Default: no write routes (403).
	AdminToken string

	// EffectsClient, if set, lets the write routes retry effect intents.
	EffectsClient *effects.Client

	// Rebuilds, if set, lets POST /v1/actions/rebuild-start start a
	// side-by-side rebuild in this process. Default: refused (501).
	Rebuilds Rebuilder

	// Repairs, if set, lets POST /v1/actions/repair read waiting
	// aggregates' missing versions from the source. Default: refused (501).
	Repairs Repairer
}

// Repairer reads the missing versions of waiting aggregates from the
// source the workers read and feeds them through the gate: a
// source.Repairer bound to the server's source.
type Repairer interface {
	Repair(ctx context.Context, opts *source.RepairOptions) ([]source.Repair, error)
}

// Rebuilder starts a side-by-side rebuild of a projection in the server's
// process — projection.Processor.Build with opts, whose Stream it sets to
// the source's replay — and returns once it started; by names who asked,
// done receives Build's outcome.
type Rebuilder interface {
	StartRebuild(ctx context.Context, projection, by string, opts *projection.BuildOptions, done func(error)) error
}

// EffectsStats reads the open effect intents per kind; *effects.Client
// implements it.
type EffectsStats interface {
	Stats(ctx context.Context) ([]effects.KindStats, error)
}

// StatusResponse is the body of /v1/status: the gate's status and, when the
// API has Options.Effects, the open effect intents per kind.
type StatusResponse struct {
	projection.Status
	Effects []effects.KindStats `json:"effects,omitempty"`
}

// Status reads the status /v1/status serves: proc's, with fx's intents when
// fx is not nil. Its totals (aggregates, events, each generation's applied
// count: sums over every version row) may be up to
// projection.DefaultTotalsMaxAge old — read in the background, so that
// /v1/status answers in a time bounded by indexes (totals_at says when they
// were read); every other figure is read live.
func Status(ctx context.Context, proc *projection.Processor, fx EffectsStats) (StatusResponse, error) {
	st, err := proc.Status(ctx, &projection.StatusOptions{TotalsMaxAge: projection.DefaultTotalsMaxAge})
	if err != nil {
		return StatusResponse{}, err
	}
	r := StatusResponse{Status: st}
	if fx != nil {
		if r.Effects, err = fx.Stats(ctx); err != nil {
			return StatusResponse{}, err
		}
	}
	return r, nil
}

// handler is the API; New returns it as an http.Handler.
type handler struct {
	proc      *projection.Processor
	opts      Options
	log       *slog.Logger
	tokenHash [sha256.Size]byte
	adminHash [sha256.Size]byte
	mux       *http.ServeMux
	onWait    func() // test hook: a request starts waiting for min_version
}

// New returns the API's handler for the processor's projections. See the
// package documentation for the routes.
func New(proc *projection.Processor, opts *Options) http.Handler {
	if opts == nil {
		opts = &Options{}
	}
	o := *opts
	o.MaxWait = min(positive(o.MaxWait, DefaultMaxWait), MaxMaxWait)
	o.RequestTimeout = positive(o.RequestTimeout, DefaultRequestTimeout)
	o.MaxBodyBytes = positive(o.MaxBodyBytes, DefaultMaxBodyBytes)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{proc: proc, opts: o, log: o.Logger, tokenHash: sha256.Sum256([]byte(o.Token)), adminHash: sha256.Sum256([]byte(o.AdminToken))}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", h.healthz)
	mux.HandleFunc("GET /readyz", h.readyz)
	mux.HandleFunc("GET /v1/status", h.status)
	mux.HandleFunc("GET /v1/projections", h.projections)
	mux.HandleFunc("GET /v1/projections/{name}", h.projectionInfo)
	mux.HandleFunc("GET /v1/projections/{name}/aggregates", h.list)
	mux.HandleFunc("GET /v1/projections/{name}/aggregates/{$}", h.emptyID)
	mux.HandleFunc("GET /v1/projections/{name}/aggregates/{id}", h.aggregate)
	mux.HandleFunc("POST /v1/actions/{action}", h.action)
	mux.HandleFunc("/", h.notFound)
	h.mux = mux
	return h
}

// positive returns v, or def when v is not positive.
func positive[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// ServeHTTP implements http.Handler: the checks every request goes through,
// then the routes.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &httpstatus.Recorder{ResponseWriter: w}
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.log.ErrorContext(r.Context(), "http api panic", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			if !rec.Wrote() {
				writeError(rec, http.StatusInternalServerError, CodeInternal, "internal error")
			}
		}
		h.log.DebugContext(r.Context(), "http api request", "method", r.Method, "path", r.URL.Path,
			"status", rec.Status(), "duration", time.Since(start))
	}()
	hdr := rec.Header()
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")

	write := strings.HasPrefix(r.URL.Path, "/v1/actions/")
	switch {
	case write && r.Method != http.MethodPost:
		hdr.Set("Allow", "POST")
		writeError(rec, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "actions are POSTed")
		return
	case !write && r.Method != http.MethodGet && r.Method != http.MethodHead:
		hdr.Set("Allow", "GET, HEAD")
		writeError(rec, http.StatusMethodNotAllowed, CodeMethodNotAllowed, "only GET and HEAD are allowed")
		return
	}
	if write {
		// The action reads its body itself; the admin token is checked
		// instead of the read token.
		if p := r.URL.EscapedPath(); strings.Contains(p, "//") || strings.Contains(p, "/.") {
			writeError(rec, http.StatusBadRequest, CodeBadRequest, "the path is not canonical")
			return
		}
		if h.opts.AdminToken == "" {
			writeError(rec, http.StatusForbidden, CodeForbidden, "this server has no admin token: its write routes are off")
			return
		}
		if !h.authorizedAs(r, h.adminHash) {
			hdr.Set("WWW-Authenticate", `Bearer realm="inorder-admin"`)
			writeError(rec, http.StatusUnauthorized, CodeUnauthorized, "actions need the admin bearer token")
			return
		}
		h.mux.ServeHTTP(rec, r)
		return
	}
	if !h.readBody(rec, w, r) {
		return
	}
	if p := r.URL.EscapedPath(); p == "" || p[0] != '/' || strings.Contains(p, "//") ||
		strings.Contains(p, "/./") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..") {
		writeError(rec, http.StatusBadRequest, CodeBadRequest, "the path is not canonical")
		return
	}
	if h.opts.Token != "" && r.URL.Path != "/healthz" && r.URL.Path != "/readyz" && !h.authorized(r) {
		hdr.Set("WWW-Authenticate", `Bearer realm="inorder"`)
		writeError(rec, http.StatusUnauthorized, CodeUnauthorized, "a valid bearer token is required")
		return
	}
	h.mux.ServeHTTP(rec, r)
}

// readBody refuses a body over the limit and drains a smaller one (the API
// reads none), so a slow or huge body cannot hold a handler.
// raw is the server's own writer, which MaxBytesReader tells to close the
// connection after an oversized body.
func (h *handler) readBody(w, raw http.ResponseWriter, r *http.Request) bool {
	if r.ContentLength > h.opts.MaxBodyBytes {
		writeError(w, http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "the request body is too large")
		return false
	}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return true
	}
	_, err := io.Copy(io.Discard, http.MaxBytesReader(raw, r.Body, h.opts.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	var netErr net.Error
	switch {
	case err == nil:
		return true
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "the request body is too large")
	case errors.As(err, &netErr) && netErr.Timeout():
		writeError(w, http.StatusRequestTimeout, CodeRequestTimeout, "the request body did not arrive in time")
	default:
		writeError(w, http.StatusBadRequest, CodeBadRequest, "the request body could not be read")
	}
	return false
}

func (h *handler) authorized(r *http.Request) bool { return h.authorizedAs(r, h.tokenHash) }

// authorizedAs compares the bearer token's hash with want in constant time.
func (h *handler) authorizedAs(r *http.Request, want [sha256.Size]byte) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

// fail answers an unexpected error without revealing it, and logs it.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, what string, err error) {
	switch {
	case r.Context().Err() != nil:
		// The client is gone; nobody reads the answer.
		h.log.DebugContext(r.Context(), "http api request cancelled", "what", what, "path", r.URL.Path, "error", err)
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the request was cancelled")
	case errors.Is(err, context.DeadlineExceeded) || projection.IsTransient(err):
		h.log.WarnContext(r.Context(), "http api database unavailable", "what", what, "path", r.URL.Path, "error", err)
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the database is unavailable or too slow; retry later")
	default:
		h.log.ErrorContext(r.Context(), "http api internal error", "what", what, "path", r.URL.Path, "error", err)
		writeError(w, http.StatusInternalServerError, CodeInternal, "internal error")
	}
}

func (h *handler) notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, CodeNotFound, "no such route; see GET /v1/projections")
}

func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	_ = writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), min(readyTimeout, h.opts.RequestTimeout))
	defer cancel()
	if err := h.proc.Ping(ctx); err != nil {
		h.log.WarnContext(ctx, "http api database not ready", "error", err)
		writeError(w, http.StatusServiceUnavailable, CodeUnavailable, "the database is not reachable")
		return
	}
	_ = writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
