package console

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/httpapi"
	"github.com/inorder/inorder/projection"
)

// Defaults of Options.
const (
	// DefaultPrefix is Options.Prefix's default.
	DefaultPrefix = "/console/"
	// SessionTTL is how long a login lasts.
	SessionTTL = 12 * time.Hour
	// DefaultRequestTimeout is Options.RequestTimeout's default.
	DefaultRequestTimeout = 10 * time.Second
	// PageSize is the rows a list page shows; MaxPageSize caps ?limit=.
	PageSize    = 50
	MaxPageSize = 500
)

// Options configures New. A nil *Options is valid: an open, read-only
// console at DefaultPrefix that masks payloads.
type Options struct {
	// Prefix is the path the console is mounted at, with a trailing slash.
	// Default DefaultPrefix ("/console/").
	Prefix string

	// Token is the read token: when set, the pages need a login with it
	// (the HTTP API's bearer token, httpapi.Options.Token). Default: the
	// pages are open.
	Token string

	// AdminToken is the token the actions need (a login with it). Default:
	// none, and the console is read-only.
	AdminToken string

	// ShowPayloads shows events' data and metadata. Default: masked, and
	// never read from the database.
	ShowPayloads bool

	// Effects, if set, adds the effect intents (counts, lists, retry).
	Effects *effects.Client

	// Sources, if set, reports the lag of the sources that run in this
	// process (inorder run), shown on the overview.
	Sources func() []SourceLag

	// Rebuilds, if set, lets the console start side-by-side rebuilds in
	// this process (the source's replay is the caller's). Default: the
	// rebuild page shows rebuilds and acts on generations, but starts
	// none.
	Rebuilds httpapi.Rebuilder

	// Repairs, if set, lets the console repair parked aggregates from the
	// source (httpapi.Repairer).
	Repairs httpapi.Repairer

	// RequestTimeout bounds the database work of one page. Default
	// DefaultRequestTimeout (10 s).
	RequestTimeout time.Duration

	// Logger receives internal errors and every action. Default: discarded.
	Logger *slog.Logger
}

// SourceLag is how far one source of the process is behind its stream.
type SourceLag struct {
	// Name is the source's name (its checkpoint), Kind what it reads
	// ("esdb", …).
	Name string
	Kind string
	// Known is false until the source measured its lag.
	Known bool
	// Events and Behind are the events not yet applied and the age of the
	// oldest of them.
	Events int64
	Behind time.Duration
	// Workers is how many workers of the process the source feeds.
	Workers int
	// Projections are the projections it feeds.
	Projections []string
}

//go:embed ui/*.html
var pageFiles embed.FS

//go:embed ui/static
var staticFiles embed.FS

// handler is the console; New returns it as an http.Handler.
type handler struct {
	proc    *projection.Processor
	opts    Options
	log     *slog.Logger
	key     []byte // session signing key
	pages   map[string]*template.Template
	static  http.Handler
	mux     *http.ServeMux
	rates   *rates
	builds  *builds
	started time.Time
}

// New returns the console for the processor's projections. See the package
// documentation.
func New(proc *projection.Processor, opts *Options) http.Handler {
	h, err := newHandler(proc, opts)
	if err != nil {
		panic(err) // the embedded templates are fixed: a test catches this
	}
	return h
}

func newHandler(proc *projection.Processor, opts *Options) (*handler, error) {
	if opts == nil {
		opts = &Options{}
	}
	o := *opts
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{proc: proc, opts: o, log: o.Logger, key: sessionKey(o.Token, o.AdminToken),
		rates: newRates(), builds: newBuilds(), started: time.Now()}
	if err := h.parse(); err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFiles, "ui/static")
	if err != nil {
		return nil, err
	}
	h.static = http.StripPrefix(o.Prefix+"static/", http.FileServerFS(sub))
	p := o.Prefix
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+p+"static/", h.serveStatic)
	mux.HandleFunc("GET "+p+"login", h.loginPage)
	mux.HandleFunc("POST "+p+"login", h.login)
	mux.HandleFunc("POST "+p+"logout", h.logout)
	mux.HandleFunc("GET "+p+"{$}", h.read(h.overview))
	mux.HandleFunc("GET "+p+"aggregate", h.read(h.aggregate))
	mux.HandleFunc("GET "+p+"quarantine", h.read(h.quarantine))
	mux.HandleFunc("GET "+p+"parked", h.read(h.parked))
	mux.HandleFunc("GET "+p+"rejected", h.read(h.rejected))
	mux.HandleFunc("GET "+p+"conflicts", h.read(h.conflicts))
	mux.HandleFunc("GET "+p+"effects", h.read(h.effectsPage))
	mux.HandleFunc("GET "+p+"rebuilds", h.read(h.rebuilds))
	mux.HandleFunc("GET "+p+"log", h.read(h.oplog))
	mux.HandleFunc("POST "+p+"actions/{action}", h.act)
	mux.HandleFunc(p, h.notFound)
	h.mux = mux
	return h, nil
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"age": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return ago(time.Since(t))
	},
	"dur": func(d time.Duration) string { return ago(d) },
	"secs": func(s float64) string {
		return ago(time.Duration(s * float64(time.Second)))
	},
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"payload": payloadText,
	"hex":     hexShort,
	"pct": func(f float64) string {
		if f < 0 {
			return "-"
		}
		return formatPct(f)
	},
	"deref": func(v *int64) any {
		if v == nil {
			return "-"
		}
		return *v
	},
	"inc": func(v int64) int64 { return v + 1 },
}

func (h *handler) parse() error {
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(pageFiles, "ui/layout.html")
	if err != nil {
		return err
	}
	names, err := fs.Glob(pageFiles, "ui/*.html")
	if err != nil {
		return err
	}
	h.pages = map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "ui/"), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(pageFiles, n)
		if err != nil {
			return err
		}
		h.pages[name] = t
	}
	return nil
}

// ServeHTTP implements http.Handler: the headers every answer carries, then
// the routes.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			h.log.ErrorContext(r.Context(), "console panic", "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
			http.Error(w, "internal error", http.StatusInternalServerError)
		}
	}()
	hdr := w.Header()
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "same-origin")
	hdr.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
		"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	if r.Method == http.MethodPost && !h.sameOrigin(r) {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *handler) serveStatic(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=300")
	h.static.ServeHTTP(w, r)
}

// view is what every page's template gets.
type view struct {
	Prefix   string
	Title    string
	Nav      string
	Session  session
	CSRF     string
	CanAct   bool
	ReadOnly string // why actions are off, when they are
	Payloads bool
	Fragment bool
	Refresh  int // milliseconds between live refreshes, 0 for none
	Error    string
	Notice   string
	Data     any
}

// render writes a page, or its live fragment when the page's script asks
// for one.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, page string, v view) {
	t := h.pages[page]
	v.Prefix = h.opts.Prefix
	v.Payloads = h.opts.ShowPayloads
	s, _ := h.session(r)
	v.Session = s
	v.CSRF = h.csrf(s)
	v.CanAct = s.Admin && h.opts.AdminToken != ""
	switch {
	case h.opts.AdminToken == "":
		v.ReadOnly = "read-only: this server has no admin token (--http-admin-token)"
	case !s.Admin:
		v.ReadOnly = "read-only: log in with the admin token to act"
	}
	name := "layout.html"
	if r.Header.Get("X-Console-Fragment") == "1" {
		v.Fragment = true
		name = "live"
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, v); err != nil {
		h.log.ErrorContext(r.Context(), "console render", "page", page, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail shows an error page for err without revealing it, and logs it.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, page, title string, err error) {
	status, msg := http.StatusInternalServerError, "internal error (logged)"
	switch {
	case errors.Is(err, projection.ErrUnknownProjection):
		status, msg = http.StatusNotFound, "unknown projection"
	case r.Context().Err() != nil:
		status, msg = http.StatusServiceUnavailable, "the request was cancelled"
	case errors.Is(err, context.DeadlineExceeded) || projection.IsTransient(err):
		status, msg = http.StatusServiceUnavailable, "the database is unavailable or too slow; retry later"
		h.log.WarnContext(r.Context(), "console database unavailable", "path", r.URL.Path, "error", err)
	default:
		h.log.ErrorContext(r.Context(), "console internal error", "path", r.URL.Path, "error", err)
	}
	h.render(w, r, status, page, view{Title: title, Error: msg})
}

func (h *handler) notFound(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, http.StatusNotFound, "error", view{Title: "Not found", Error: "no such page"})
}

// ctx bounds a page's database work.
func (h *handler) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.opts.RequestTimeout)
}
