package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/console"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/httpapi"
	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/metrics"
	"github.com/inorder/inorder/migrations"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// DefaultDrainTimeout is run's default --drain-timeout.
const DefaultDrainTimeout = 30 * time.Second

// runOptions configures run.
type runOptions struct {
	log          clikit.LogOptions
	db           clikit.DBOptions
	src          sourceOptions
	http         clikit.HTTPOptions
	Name         string
	Workers      int
	BatchSize    int
	MaxWait      time.Duration
	FromEnd      bool
	DrainTimeout time.Duration
	ReadyMaxLag  time.Duration
	Migrate      bool
	Build        bool
	Owner        bool
	// fx are the --effects-* flags; Workers 0 records intents without
	// performing them (an 'effects work' process does).
	fx effectsFlags
}

func (o *runOptions) validate(args []string) error {
	if err := clikit.NoArgs(args); err != nil {
		return err
	}
	return cmp.Or(
		clikit.ValidateAll(&o.log, &o.db, &o.src, &o.http),
		clikit.AtLeast("workers", o.Workers, 1),
		clikit.AtLeast("batch-size", o.BatchSize, 1),
		clikit.Positive("max-wait", o.MaxWait),
		clikit.NotNegative("ready-max-lag", o.ReadyMaxLag),
		clikit.Positive("drain-timeout", o.DrainTimeout),
		o.fx.validate(0),
	)
}

// sourceName returns --name, or by default the source's first scheme
// ("esdb", "postgres"): the checkpoint row of a source run before names
// were per source keeps its name.
func (o *sourceOptions) sourceName(name string) string {
	if name != "" {
		return name
	}
	return o.driver.Schemes()[0]
}

// openConfig is what run, rebuild and repair give the source they open.
func (o *sourceOptions) openConfig(db *clikit.DBOptions, name string, logger *slog.Logger) *source.OpenConfig {
	return &source.OpenConfig{DatabaseURL: db.URL, Schema: db.Schema, Name: o.sourceName(name), Logger: logger,
		Workers: source.DefaultWorkers, BatchSize: source.DefaultBatchSize, MaxWait: source.DefaultMaxWait, DrainTimeout: DefaultDrainTimeout}
}

// runCmd runs the projection workers.
type runCmd struct{ a *App }

func (c *runCmd) command() *cobra.Command {
	cmd := leaf("run", "run the projection workers against a source (EventStoreDB, an events table…)",
		`Consumes the source --source names (its URL's scheme chooses it: see the
flags below, grouped by source) and applies every event to the projections
through the version gate, with --workers workers per process (aggregates are
partitioned across them by hash), batching up to --batch-size events per
transaction (waiting at most --max-wait for a batch to fill). The source's
position is checkpointed in Postgres (row --name) in the same transaction as
the writes, or acknowledged to its server only after the commit.

EventStoreDB (esdb://…, --esdb-url): --mode catch-up (default) is a catch-up
subscription to $all, filtered by --stream-prefix / --type-regex;
--mode persistent is one consumer of the persistent subscription --group (to
$all, or to --stream such as $ce-payment), created if missing; any number of
processes compete for its events, which arrive out of order and duplicated:
the gate absorbs both. Two catch-up processes with the same --name share one
checkpoint and both read everything: give each its own --name, or use
persistent mode to share the work. Gap repair: aggregates whose parked events
waited longer than --repair-after get their missing versions read from their
stream.

Any number of processes may run side by side on one schema: the gate
serialises them per aggregate. Each source's page in docs/sources says how it
shares the work between processes.

It serves /healthz, /readyz (ready once the workers run, while the database
answers, the schema is migrated and — with --ready-max-lag — the lag is
within bounds), /metrics and the read-model HTTP API on --http-addr.

Effects: in a binary with effect handlers, it also performs the effect
intents the projections record (webhooks, e-mails, API calls), with
--effects-workers calls at a time, after their transactions commit; 0 leaves
them to 'effects work' processes. The --effects-* flags (call timeout,
lease, reconciliation interval, River's rescue) are those of 'effects work',
which says how intents of dead executors are taken up.

The first SIGINT/SIGTERM drains: stop receiving, commit and acknowledge the
batches in flight, save the checkpoint, let the effect calls under way finish
(at most --drain-timeout each). A second one exits at once; uncommitted
batches roll back and are delivered again, and interrupted effect calls are
taken up again, with the same idempotency key, once their claims expire.

Changes: the projections' read models and inorder's tables in --schema
(versions, parked, quarantine, conflicts, rejected, checkpoints, effects) and
River's job table; with --migrate it first applies pending migrations
(River's included) and creates the read-model tables. With --build (the default), a projection whose code version no live
generation has — a new version deployed next to the old workers — is rebuilt
side by side by one of the processes running that version (the others wait
for it, and take over if it dies): see 'rebuild'. The old workers keep the
live generation current meanwhile; after the switch, this process feeds the
new one. A source may keep state of its own (a persistent subscription group
it creates, leases on partitions). It calls the effects' other sides.`,
		func(fs *pflag.FlagSet) *runOptions {
			o := &runOptions{}
			clikit.BindLog(fs, &o.log, "info")
			clikit.BindDB(fs, &o.db)
			c.a.bindSource(fs, "run", &o.src)
			clikit.BindHTTP(fs, &o.http, "127.0.0.1:8080")
			fs.StringVar(&o.Name, "name", "", "source `name`: its checkpoint row (or group, or lease set), and the source recorded with rejected events (default: the source's scheme, such as esdb or postgres)")
			fs.IntVar(&o.Workers, "workers", 4, "workers of this process; aggregates are partitioned across them by hash")
			fs.IntVar(&o.BatchSize, "batch-size", 500, "events per transaction, at most")
			fs.DurationVar(&o.MaxWait, "max-wait", 50*time.Millisecond, "longest wait for a batch to fill")
			fs.BoolVar(&o.FromEnd, "from-end", false, "start at the end of the stream, not its beginning (when there is no checkpoint yet / when creating the group)")
			fs.DurationVar(&o.DrainTimeout, "drain-timeout", DefaultDrainTimeout, "longest graceful drain after the first signal")
			fs.DurationVar(&o.ReadyMaxLag, "ready-max-lag", 0, "/readyz fails while the source's lag (the age of the oldest event not committed yet) exceeds this `duration`; 0: lag does not affect readiness")
			fs.BoolVar(&o.Migrate, "migrate", false, "apply pending migrations and create the read-model tables before starting")
			fs.BoolVar(&o.Build, "build", true, "rebuild side by side a projection whose code version no live generation has (one process builds, the others wait)")
			fs.BoolVar(&o.Owner, "owner", false, "own the inline projections' gate keys while this process runs (one process at a time; the others write fenced): no guard rows for new aggregates (docs/owner.md); only once every process runs this release")
			bindEffects(fs, &o.fx, c.a.cfg.EffectsConfig, "effects performed at once by this process (0: only record them, for 'effects work' processes)")
			return o
		}, c.Run)
	cmd.SetUsageFunc(clikit.GroupedUsage)
	return cmd
}

// Run runs the workers until the first signal, then drains.
func (c *runCmd) Run(ctx context.Context, o *runOptions) error {
	logger := o.log.Logger(c.a.stderr)
	w, err := c.open(ctx, o, logger)
	defer w.close()
	if err != nil {
		return err
	}
	oc := o.src.openConfig(&o.db, o.Name, logger)
	oc.Processor, oc.Workers, oc.BatchSize, oc.MaxWait = w.proc, o.Workers, o.BatchSize, o.MaxWait
	oc.FromEnd, oc.DrainTimeout = o.FromEnd, o.DrainTimeout
	oc.OnReady = func() { w.ready.Set(true, "") }
	src, err := o.src.opener.Open(ctx, o.src.url, oc)
	if err != nil {
		return err
	}
	if o.ReadyMaxLag > 0 {
		w.ready.MaxLag = o.ReadyMaxLag
		w.ready.Lag = func() (time.Duration, bool) {
			l := src.Lag()
			return l.Behind, l.Known
		}
	}
	if err := src.RegisterMetrics(w.m.Registry()); err != nil {
		return err
	}
	srv, err := c.serve(ctx, o, w, src, logger)
	if err != nil {
		return err
	}
	if w.fx != nil && o.fx.Workers > 0 {
		if err := w.fx.Start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		logRecovery(logger.With("river_schema", o.db.River()), w.fx, o.fx.Workers)
	}
	logger.Info("workers starting", "source", o.src.title(), "name", oc.Name, "workers", o.Workers, "batch_size", o.BatchSize,
		"projections", strings.Join(w.proc.Projections(), ","), "schema", o.db.Schema)
	return c.work(ctx, o, w, src, srv, logger)
}

// runParts is what a run holds open: closed, newest first, by close.
type runParts struct {
	tracing *clikit.Tracing
	pool    *pgxpool.Pool
	fx      *effects.Client
	proc    *projection.Processor
	m       *metrics.Metrics
	ready   *clikit.Readiness
	closers []func()
}

func (w *runParts) close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
}

// open connects, migrates (with --migrate), announces the worker, and
// builds the effects client and the instrumented processor, its
// projections set up. The caller closes what it returns, on error too.
func (c *runCmd) open(ctx context.Context, o *runOptions, logger *slog.Logger) (*runParts, error) {
	w := &runParts{}
	conns := o.Workers + 6
	if o.Build {
		conns += 3 // a side-by-side rebuild of a new code version
	}
	if len(c.a.cfg.Effects) > 0 && o.fx.Workers > 0 {
		conns += effectsConns(o.fx.Workers)
	}
	// Tracing first: a bad OTEL_* variable is a usage error, before connecting.
	var err error
	if w.tracing, err = c.a.tracing(ctx, logger); err != nil {
		return w, err
	}
	w.closers = append(w.closers, func() { shutdownTracing(w.tracing, logger) })
	if w.pool, err = clikit.Connect(ctx, &o.db, int32(conns), logger); err != nil {
		return w, err
	}
	w.closers = append(w.closers, w.pool.Close)
	if err := c.a.prepareSchema(ctx, w.pool, &o.db, o.Migrate, true, logger); err != nil {
		return w, err
	}
	// After migrating: a migrator refuses offline migrations while workers
	// have announced themselves, until the drain is over.
	presence, err := migrations.Announce(ctx, w.pool, o.db.Schema, logger)
	if err != nil {
		return w, err
	}
	w.closers = append(w.closers, presence.Close)
	// The effects client first: the projections that record intents get it
	// before any batch runs.
	if w.fx, err = c.a.effectsClient(w.pool, &o.db, logger, &o.fx); err != nil {
		return w, err
	}
	pc := c.a.cfg.Processor
	pc.Owner = pc.Owner || o.Owner
	if pc.TracerProvider == nil {
		pc.TracerProvider = w.tracing.Provider // a span per batch, with the HTTP API's exporter
	}
	var closeMetrics func()
	if w.proc, w.m, closeMetrics, err = clikit.InstrumentedProcessor(ctx, w.pool, &o.db, pc, c.a.cfg.Projections, c.a.version(), true, logger); err != nil {
		return w, err
	}
	w.closers = append(w.closers, closeMetrics, func() {
		// The leases of --owner: their rows go, so other writers stop
		// waiting on them.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := w.proc.Close(ctx); err != nil {
			logger.Warn("end the leases", "error", err)
		}
	})
	if w.fx != nil {
		if err := w.fx.RegisterMetrics(w.m.Registry()); err != nil {
			return w, fmt.Errorf("effects metrics: %w", err)
		}
	}
	if err := w.proc.Setup(ctx); err != nil {
		return w, err // the processor names the projection and the step
	}
	w.ready = clikit.NewReadiness(w.pool, o.db.Schema)
	w.ready.Set(false, "the workers have not subscribed yet")
	return w, nil
}

// serve starts the HTTP API, health checks, metrics and console on
// --http-addr; nil without one. The console's rebuilds are waited for when
// w closes.
func (c *runCmd) serve(ctx context.Context, o *runOptions, w *runParts, src source.Feed, logger *slog.Logger) (*clikit.Server, error) {
	if o.http.Addr == "" {
		return nil, nil
	}
	sources := func() []console.SourceLag {
		l := src.Lag()
		return []console.SourceLag{{Name: l.Source, Kind: o.src.title(), Known: l.Known, Events: l.Events, Behind: l.Behind,
			Workers: o.Workers, Projections: w.proc.Projections()}}
	}
	rebuilds := &consoleRebuilds{proc: w.proc, logger: logger, ctx: ctx, replayer: func(ctx context.Context) (projection.Stream, error) {
		return o.src.opener.Replayer(ctx, o.src.url, o.src.openConfig(&o.db, o.Name, logger))
	}}
	w.closers = append(w.closers, rebuilds.wait)
	var repairs httpapi.Repairer
	if rp, ok := o.src.opener.(source.Repairer); ok {
		repairs = repairFunc(func(ctx context.Context, opts *source.RepairOptions) ([]source.Repair, error) {
			rc := o.src.openConfig(&o.db, o.Name, logger)
			rc.Processor = w.proc
			return rp.Repair(ctx, o.src.url, rc, opts)
		})
	}
	srv, err := clikit.StartHTTP(&o.http, clikit.Serve{Processor: w.proc, Effects: w.fx, Ready: w.ready, Metrics: w.m, Tracing: w.tracing,
		Sources: sources, Rebuilds: rebuilds, Repairs: repairs, Logger: logger})
	if err != nil {
		return nil, err
	}
	clikit.NewConsole(c.a.stderr, &o.log).Printf([]any{"url", srv.URL()}, "serving %s", srv.URL())
	return srv, nil
}

// work runs the source (and, with --build, the side-by-side builds of new
// code versions) until it ends, the HTTP server fails, or a signal asks
// for the drain; then drains (a second signal aborts), stops the effects
// workers and the HTTP server, and returns the first error.
func (c *runCmd) work(ctx context.Context, o *runOptions, w *runParts, src source.Feed, srv *clikit.Server, logger *slog.Logger) error {
	// Run drains when its context ends (the first signal) and stops at
	// once on Abort (the second).
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx) }()
	var builds sync.WaitGroup
	if o.Build {
		buildCtx, stopBuilds := context.WithCancel(ctx)
		defer func() {
			stopBuilds()
			builds.Wait()
		}()
		if err := c.buildNewVersions(buildCtx, w.proc, o, logger, &builds); err != nil {
			return err
		}
	}
	var err, httpErr error
	finished := false
	select {
	case err = <-done:
		finished = true
	case <-c.a.drain.Done():
	case <-ctx.Done():
	case httpErr = <-srv.Err():
	}
	if !finished {
		w.ready.Set(false, "draining")
		logger.Info("draining: finishing the batches in flight (signal again to stop at once)")
		stopRun()
		select {
		case err = <-done:
		case <-ctx.Done():
			src.Abort()
			err = <-done
		}
	}
	var fxErr error
	if w.fx != nil && o.fx.Workers > 0 {
		// After the projection workers: their last batches' intents are
		// committed; those left are performed by the next process.
		fxErr = stopEffects(ctx, w.fx, o.DrainTimeout)
	}
	if srv != nil {
		if serr := srv.Shutdown(5 * time.Second); serr != nil && httpErr == nil {
			httpErr = serr
		}
	}
	logger.Info("workers stopped", "source", o.src.title(), "aborted", errors.Is(err, source.ErrAborted))
	if err != nil {
		return err
	}
	if fxErr != nil {
		return fxErr
	}
	if httpErr != nil {
		return fmt.Errorf("http: %w", httpErr)
	}
	return nil
}

// buildNewVersions starts, in the background, a side-by-side rebuild of
// every projection of which the processor feeds no generation: its code
// version is new. One process builds; the others wait for it (and resume
// it if it dies).
func (c *runCmd) buildNewVersions(ctx context.Context, proc *projection.Processor, o *runOptions, logger *slog.Logger, wg *sync.WaitGroup) error {
	unfed, err := proc.Unfed(ctx)
	if err != nil || len(unfed) == 0 {
		return err
	}
	r, err := o.src.opener.Replayer(ctx, o.src.url, o.src.openConfig(&o.db, o.Name, logger))
	if err != nil {
		return err
	}
	for _, name := range unfed {
		wg.Go(func() {
			logger.Info("rebuilding side by side: no live generation has this code version", "projection", name)
			phase := ""
			res, err := proc.Build(ctx, name, &projection.BuildOptions{Stream: r, Wait: true, Progress: func(pr projection.BuildProgress) {
				if pr.Note != "" {
					logger.Info("rebuild: "+pr.Note, "projection", name, "generation", pr.Generation)
				}
				if pr.Phase != phase {
					phase = pr.Phase
					logger.Info("rebuild phase", "projection", name, "generation", pr.Generation, "phase", pr.Phase, "events", pr.Events)
				}
			}})
			switch {
			case err != nil && ctx.Err() != nil:
				logger.Info("rebuild stopped; the next run resumes it", "projection", name, "generation", res.Generation)
			case err != nil:
				logger.Error("rebuild failed: this process feeds no generation of the projection", "projection", name, "error", err)
			default:
				logger.Info("rebuild done: the generation of this code version is live", "projection", name,
					"generation", res.Generation, "previous", res.Previous, "events", res.Events, "already_live", res.AlreadyLive)
			}
		})
	}
	return nil
}

// consoleRebuilds starts the side-by-side rebuilds that an operator asks
// for through the console or the write routes, in this process, reading
// the stream as the workers do.
type consoleRebuilds struct {
	proc     *projection.Processor
	replayer func(ctx context.Context) (projection.Stream, error)
	logger   *slog.Logger
	ctx      context.Context // the command's: a rebuild stops with the process (and resumes when run again)
	wg       sync.WaitGroup
}

// StartRebuild implements httpapi.Rebuilder.
func (c *consoleRebuilds) StartRebuild(_ context.Context, name, by string, opts *projection.BuildOptions, done func(error)) error {
	r, err := c.replayer(c.ctx)
	if err != nil {
		return err
	}
	c.wg.Go(func() {
		c.logger.Info("rebuild started by an operator", "projection", name, "by", by)
		o := *opts
		o.Stream = r
		res, err := c.proc.Build(c.ctx, name, &o)
		if err != nil {
			c.logger.Error("rebuild failed", "projection", name, "by", by, "error", err)
			done(err)
			return
		}
		c.logger.Info("rebuild done", "projection", name, "generation", res.Generation, "previous", res.Previous, "events", res.Events)
		done(nil)
	})
	return nil
}

func (c *consoleRebuilds) wait() { c.wg.Wait() }

// repairFunc is an httpapi.Repairer made of a function.
type repairFunc func(ctx context.Context, opts *source.RepairOptions) ([]source.Repair, error)

// Repair implements httpapi.Repairer.
func (f repairFunc) Repair(ctx context.Context, opts *source.RepairOptions) ([]source.Repair, error) {
	return f(ctx, opts)
}
