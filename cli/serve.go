package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/inorder/inorder/metrics"
)

// serveOptions configures serve.
type serveOptions struct {
	log  logOptions
	db   dbOptions
	http httpOptions
}

func (o *serveOptions) validate(args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	if err := o.log.validate(); err != nil {
		return err
	}
	if err := o.db.validate(); err != nil {
		return err
	}
	if o.http.Addr == "" {
		return usageErrorf("--http-addr must not be empty")
	}
	return o.http.validate()
}

// serveCmd serves the HTTP API alone.
type serveCmd struct{ a *app }

func (c *serveCmd) command() *command {
	return leaf("serve", "", "serve the read-model HTTP API alone, without workers",
		`Serves the read-model HTTP API on --http-addr — one aggregate, filtered lists,
?min_version= read-your-writes, /v1/status — with /healthz, /readyz and
Prometheus /metrics, for as many replicas as reads need. Workers ('run')
serve the same API; use 'serve' to scale reads apart from them.

Read-only: it changes nothing in the database. The first SIGINT/SIGTERM
drains the requests in flight, a second one exits at once.`,
		func(fs *flagSet) *serveOptions {
			o := &serveOptions{}
			bindLog(fs, &o.log, "info")
			bindDB(fs, &o.db)
			bindHTTP(fs, &o.http, DefaultHTTPAddr)
			return o
		}, c.Run)
}

// Run serves until the first signal.
func (c *serveCmd) Run(ctx context.Context, o *serveOptions) error {
	logger := c.a.logger(&o.log)
	pool, err := connect(ctx, &o.db, 16, logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	proc, err := c.a.processor(pool, o.db.Schema, logger)
	if err != nil {
		return err
	}
	m := metrics.New(proc, &metrics.Options{Logger: logger})
	srv, err := startHTTP(&o.http, proc, nil, m.Handler(), logger)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.a.stderr, "serving %s (Ctrl-C to stop)\n", srv.url())
	select {
	case <-ctx.Done():
	case <-c.a.drain.Done():
	case err := <-srv.errc:
		return fmt.Errorf("http: %w", err)
	}
	logger.Info("inorder: shutting down the HTTP API")
	return srv.shutdown(10 * time.Second)
}
