package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/inorder/inorder/httpapi"
	"github.com/inorder/inorder/projection"
)

// httpOptions are the flags of commands that serve HTTP.
type httpOptions struct {
	Addr    string
	Token   string
	MaxWait time.Duration
}

func bindHTTP(fs *flagSet, o *httpOptions, def string) {
	fs.stringVar(&o.Addr, "http-addr", EnvHTTPAddr, def, "listen `address` of the HTTP API, health checks and /metrics (\"\" disables it)")
	fs.stringVar(&o.Token, "http-token", EnvHTTPToken, "", "bearer `token` the read-model API requires (/healthz, /readyz and /metrics are open; default: no token)")
	fs.durationVar(&o.MaxWait, "http-max-wait", "INORDER_HTTP_MAX_WAIT", httpapi.DefaultMaxWait, "longest wait of a ?min_version= read")
}

func (o *httpOptions) validate() error {
	if o.Addr != "" {
		if _, _, err := net.SplitHostPort(o.Addr); err != nil {
			return usageErrorf("invalid --http-addr %q: %v", o.Addr, err)
		}
	}
	if o.MaxWait <= 0 || o.MaxWait > httpapi.MaxMaxWait {
		return usageErrorf("--http-max-wait must be in (0, %s]", httpapi.MaxMaxWait)
	}
	return nil
}

// readiness tells /readyz whether the process is ready beyond its database:
// a worker process is ready once its workers run.
type readiness struct {
	ready  atomic.Bool
	reason atomic.Value // string
}

func (r *readiness) set(ok bool, reason string) {
	r.ready.Store(ok)
	r.reason.Store(reason)
}

// httpServer is the HTTP server of run, serve and demo.
type httpServer struct {
	srv  *http.Server
	addr string // the address it listens on, port resolved
	errc chan error
}

// startHTTP serves the read-model API of proc, /metrics and the health
// checks on o.Addr. ready, if set, gates /readyz. It returns once the
// listener is open.
func startHTTP(o *httpOptions, proc *projection.Processor, ready *readiness, metrics http.Handler, logger *slog.Logger) (*httpServer, error) {
	api := httpapi.New(proc, &httpapi.Options{Token: o.Token, MaxWait: o.MaxWait, Logger: logger})
	mux := http.NewServeMux()
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	if ready != nil {
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
			if !ready.ready.Load() {
				reason, _ := ready.reason.Load().(string)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintf(w, `{"error":{"code":"unavailable","message":%q}}`+"\n", reason)
				return
			}
			api.ServeHTTP(w, r)
		})
	}
	mux.Handle("/", api)
	srv := httpapi.NewServer(o.Addr, mux)
	srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelWarn)
	lis, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("http: listen on %s: %w", o.Addr, err)
	}
	h := &httpServer{srv: srv, addr: lis.Addr().String(), errc: make(chan error, 1)}
	go func() {
		err := srv.Serve(lis)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		h.errc <- err
	}()
	logger.Info("inorder: HTTP API listening", "addr", h.addr)
	return h, nil
}

// shutdown stops accepting requests and waits for those in flight, at
// most timeout; then it closes what is left.
func (h *httpServer) shutdown(timeout time.Duration) error {
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

// url returns the base URL of the server, for printing.
func (h *httpServer) url() string {
	host, port, _ := net.SplitHostPort(h.addr)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}
