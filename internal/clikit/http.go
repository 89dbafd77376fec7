package clikit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/console"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/httpapi"
	"github.com/inorder/inorder/metrics"
	"github.com/inorder/inorder/projection"
)

// DefaultHTTPAddr is the listen address of the HTTP server of run, serve and
// demo when --http-addr is not given.
const DefaultHTTPAddr = "127.0.0.1:8080"

// HTTPOptions are the flags of commands that serve HTTP.
type HTTPOptions struct {
	Addr       string
	Token      string
	AdminToken string
	MaxWait    time.Duration
	// Console serves the operator console under /console/; Payloads shows
	// events' data in it.
	Console  bool
	Payloads bool
}

// BindHTTP defines --http-addr (default def), --http-token,
// --http-admin-token, --http-max-wait, --console and --console-payloads on
// fs.
func BindHTTP(fs *pflag.FlagSet, o *HTTPOptions, def string) {
	fs.StringVar(&o.Addr, "http-addr", def, "listen `address` of the HTTP API, health checks and /metrics (\"\" disables it)")
	fs.StringVar(&o.Token, "http-token", "", "bearer `token` the read-model API requires (/healthz, /readyz and /metrics are open; default: no token)")
	fs.StringVar(&o.AdminToken, "http-admin-token", "", "bearer `token` the write routes (POST /v1/actions/…) and the console's actions require; the read token does not do (default: none, no writes)")
	fs.DurationVar(&o.MaxWait, "http-max-wait", httpapi.DefaultMaxWait, "longest wait of a ?min_version= read")
	fs.BoolVar(&o.Console, "console", false, "serve the operator console under /console/ on the same listener (read token to read, admin token to act)")
	fs.BoolVar(&o.Payloads, "console-payloads", false, "show events' data and metadata in the console (default: masked)")
}

// Validate checks the flags.
func (o *HTTPOptions) Validate() error {
	if o.Addr != "" {
		if _, _, err := net.SplitHostPort(o.Addr); err != nil {
			return Usagef("invalid --http-addr %q: %v", o.Addr, err)
		}
	}
	if o.AdminToken != "" && o.AdminToken == o.Token {
		return Usagef("--http-admin-token must differ from --http-token")
	}
	if o.Payloads && !o.Console {
		return Usagef("--console-payloads needs --console")
	}
	if o.MaxWait <= 0 || o.MaxWait > httpapi.MaxMaxWait {
		return Usagef("--http-max-wait must be in (0, %s]", httpapi.MaxMaxWait)
	}
	return nil
}

// Readiness answers /readyz: ready when the process is (its workers run, it
// is not draining), the database answers, inorder's schema exists and is
// migrated, and — when MaxLag and Lag are set — the lag is at most MaxLag.
// /healthz stays liveness only.
type Readiness struct {
	// Pool is pinged, and Schema checked (CheckSchema).
	Pool   *pgxpool.Pool
	Schema string
	// MaxLag, when positive, fails readiness while Lag reports more.
	MaxLag time.Duration
	// Lag reports the current lag and whether it is known; nil for none.
	Lag func() (time.Duration, bool)
	// Timeout bounds the database checks of one probe. Default 2 s.
	Timeout time.Duration

	process atomic.Bool  // set: the process is ready beyond its checks
	reason  atomic.Value // string: why not
}

// NewReadiness returns the readiness of inorder's schema on pool, ready as
// a process unless Set says otherwise.
func NewReadiness(pool *pgxpool.Pool, schema string) *Readiness {
	r := &Readiness{Pool: pool, Schema: schema}
	r.Set(true, "")
	return r
}

// Set records whether the process is ready beyond its checks (workers
// subscribed, not draining), and why not.
func (r *Readiness) Set(ok bool, reason string) {
	r.process.Store(ok)
	r.reason.Store(reason)
}

// Check returns nil when ready, else an error that says why.
func (r *Readiness) Check(ctx context.Context) error {
	if !r.process.Load() {
		reason, _ := r.reason.Load().(string)
		return errors.New(reason)
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(r.Timeout, 2*time.Second))
	defer cancel()
	if err := r.Pool.Ping(ctx); err != nil {
		return fmt.Errorf("the database is not reachable: %w", err)
	}
	if err := CheckSchema(ctx, r.Pool, r.Schema, nil); err != nil {
		return err
	}
	if r.MaxLag > 0 && r.Lag != nil {
		if lag, ok := r.Lag(); ok && lag > r.MaxLag {
			return fmt.Errorf("lag %s exceeds --ready-max-lag %s", lag.Round(time.Millisecond), r.MaxLag)
		}
	}
	return nil
}

// ServeHTTP answers /readyz: 200 {"status":"ready"}, or 503 with the reason
// (the API's error body).
func (r *Readiness) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err := r.Check(req.Context()); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(httpapi.ErrorBody{Error: httpapi.Error{Code: httpapi.CodeUnavailable, Message: err.Error()}})
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"status": "ready"})
}

// Server is the HTTP server of run, serve and demo.
type Server struct {
	srv  *http.Server
	addr string // the address it listens on, port resolved
	errc chan error
}

// Serve describes what StartHTTP serves.
type Serve struct {
	// Processor's read models, status and health.
	Processor *projection.Processor
	// Ready answers /readyz. Required.
	Ready *Readiness
	// Metrics, if set, is served on /metrics and observes every request.
	Metrics *metrics.Metrics
	// Tracing, if set, makes a span of every request.
	Tracing *Tracing
	// Effects, if set, adds the open effect intents to /v1/status.
	Effects *effects.Client
	// Sources, if set, reports the lag of the process's sources to the
	// console's overview.
	Sources func() []console.SourceLag
	// Rebuilds, if set, starts side-by-side rebuilds in the process, for
	// the write routes and the console.
	Rebuilds httpapi.Rebuilder
	// Repairs, if set, repairs parked aggregates from the process's
	// source, for the write routes and the console.
	Repairs httpapi.Repairer
	Logger  *slog.Logger
}

// StartHTTP serves the read-model API, /metrics and the health checks on
// o.Addr. It returns once the listener is open.
func StartHTTP(o *HTTPOptions, s Serve) (*Server, error) {
	opts := &httpapi.Options{Token: o.Token, AdminToken: o.AdminToken, MaxWait: o.MaxWait, Logger: s.Logger,
		EffectsClient: s.Effects, Rebuilds: s.Rebuilds, Repairs: s.Repairs}
	if s.Effects != nil {
		opts.Effects = s.Effects
	}
	api := httpapi.New(s.Processor, opts)
	mux := http.NewServeMux()
	if o.Console {
		co := &console.Options{Token: o.Token, AdminToken: o.AdminToken, ShowPayloads: o.Payloads, Effects: s.Effects,
			Sources: s.Sources, Repairs: s.Repairs, Logger: s.Logger}
		if s.Rebuilds != nil {
			co.Rebuilds = s.Rebuilds
		}
		mux.Handle(console.DefaultPrefix, console.New(s.Processor, co))
		mux.Handle("GET /console", http.RedirectHandler(console.DefaultPrefix, http.StatusMovedPermanently))
	}
	if s.Metrics != nil {
		mux.Handle("GET /metrics", s.Metrics.Handler())
	}
	mux.Handle("GET /readyz", s.Ready)
	mux.Handle("/", api)
	srv := httpapi.NewServer(o.Addr, InstrumentHTTP(mux, s.Metrics, s.Tracing))
	srv.ErrorLog = slog.NewLogLogger(s.Logger.Handler(), slog.LevelWarn)
	lis, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	hs := &Server{srv: srv, addr: lis.Addr().String(), errc: make(chan error, 1)}
	go func() {
		err := srv.Serve(lis)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		hs.errc <- err
	}()
	s.Logger.Info("HTTP API listening", "addr", hs.addr, "console", o.Console, "writes", o.AdminToken != "")
	return hs, nil
}

// Err delivers the server's error if it stops on its own; nil for a nil
// server (a nil channel blocks forever in a select).
func (h *Server) Err() <-chan error {
	if h == nil {
		return nil
	}
	return h.errc
}

// Shutdown stops accepting requests and waits for those in flight, at most
// timeout; then it closes what is left.
func (h *Server) Shutdown(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := h.srv.Shutdown(ctx)
	if err != nil {
		_ = h.srv.Close()
	}
	if serr := <-h.errc; serr != nil {
		return serr
	}
	return err
}

// URL returns the base URL of the server, for printing.
func (h *Server) URL() string {
	host, port, _ := net.SplitHostPort(h.addr)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
