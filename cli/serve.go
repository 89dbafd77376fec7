package cli

import (
	"context"
	"fmt"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"time"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/metrics"
)

// serveOptions configures serve.
type serveOptions struct {
	log  clikit.LogOptions
	db   clikit.DBOptions
	http clikit.HTTPOptions
}

func (o *serveOptions) validate(args []string) error {
	if err := clikit.NoArgs(args); err != nil {
		return err
	}
	if err := o.log.Validate(); err != nil {
		return err
	}
	if err := o.db.Validate(); err != nil {
		return err
	}
	if o.http.Addr == "" {
		return clikit.Usagef("--http-addr must not be empty")
	}
	return o.http.Validate()
}

// serveCmd serves the HTTP API alone.
type serveCmd struct{ a *App }

func (c *serveCmd) command() *cobra.Command {
	return leaf("serve", "serve the read-model HTTP API alone, without workers",
		`Serves the read-model HTTP API on --http-addr — one aggregate, filtered lists,
?min_version= read-your-writes, /v1/status — with /healthz, /readyz and
Prometheus /metrics, for as many replicas as reads need. Workers ('run')
serve the same API; use 'serve' to scale reads apart from them.

Read-only: it changes nothing in the database. The first SIGINT/SIGTERM
drains the requests in flight, a second one exits at once.`,
		func(fs *pflag.FlagSet) *serveOptions {
			o := &serveOptions{}
			clikit.BindLog(fs, &o.log, "info")
			clikit.BindDB(fs, &o.db)
			clikit.BindHTTP(fs, &o.http, clikit.DefaultHTTPAddr)
			return o
		}, c.Run)
}

// Run serves until the first signal.
func (c *serveCmd) Run(ctx context.Context, o *serveOptions) error {
	logger := o.log.Logger(c.a.stderr)
	// Tracing first: a bad OTEL_* variable is a usage error, before connecting.
	tracing, err := c.a.tracing(ctx, logger)
	if err != nil {
		return err
	}
	defer shutdownTracing(tracing, logger)
	pool, err := clikit.Connect(ctx, &o.db, 16, logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	proc, err := c.a.processor(pool, &o.db, logger)
	if err != nil {
		return err
	}
	m := metrics.New(proc, &metrics.Options{Logger: logger, Build: clikit.MetricsBuild(c.a.version())})
	fx := c.a.fx // the effects client processor made, if the binary has handlers
	if fx != nil {
		if err := fx.RegisterMetrics(m.Registry()); err != nil {
			return fmt.Errorf("effects metrics: %w", err)
		}
	} else if fx, err = c.a.effectsReader(pool, &o.db, logger); err != nil {
		// /v1/status shows the intents without handlers too: they need
		// only the table.
		return err
	}
	ready := clikit.NewReadiness(pool, o.db.Schema)
	if err := ready.Check(ctx); err != nil {
		// Serve anyway (the schema may be migrated later), but say so:
		// /readyz answers 503 until it is.
		logger.Warn("not ready", "error", err)
	}
	srv, err := clikit.StartHTTP(&o.http, clikit.Serve{Processor: proc, Effects: fx, Ready: ready, Metrics: m, Tracing: tracing, Logger: logger})
	if err != nil {
		return err
	}
	clikit.NewConsole(c.a.stderr, &o.log).Printf([]any{"url", srv.URL()}, "serving %s (Ctrl-C to stop)", srv.URL())
	select {
	case <-ctx.Done():
	case <-c.a.drain.Done():
	case err := <-srv.Err():
		return fmt.Errorf("http: %w", err)
	}
	logger.Info("shutting down the HTTP API")
	return srv.Shutdown(10 * time.Second)
}
