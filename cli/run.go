package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/metrics"
	"github.com/inorder/inorder/migrations"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
)

// Environment variables of the source flags.
const (
	EnvMode         = "INORDER_MODE"
	EnvSourceName   = "INORDER_SOURCE_NAME"
	EnvGroup        = "INORDER_GROUP"
	EnvStreamPrefix = "INORDER_STREAM_PREFIX"
	EnvWorkers      = "INORDER_WORKERS"
	EnvBatchSize    = "INORDER_BATCH_SIZE"
	EnvMaxWait      = "INORDER_MAX_WAIT"
)

// Modes of run.
const (
	ModeCatchUp    = "catch-up"
	ModePersistent = "persistent"
)

// esdbOptions are the flags that say where and how to read EventStoreDB:
// shared by run (subscriptions), rebuild (replay) and parked repair.
type esdbOptions struct {
	URL          string
	StreamPrefix string
	TypeRegex    string
	VersionField string
}

func bindESDB(fs *flagSet, o *esdbOptions) {
	fs.stringVar(&o.URL, "esdb-url", EnvESDBURL, "", "EventStoreDB connection `string` (esdb://host:2113?tls=false)")
	fs.stringVar(&o.StreamPrefix, "stream-prefix", EnvStreamPrefix, "", "category `prefix` of the aggregates' streams, removed to get aggregate ids (\"payment-\": stream payment-42 is aggregate 42); other streams are ignored. Default: every non-system stream, named as its aggregate")
	fs.stringVar(&o.TypeRegex, "type-regex", "INORDER_TYPE_REGEX", "", "only events whose type matches this `regex`")
	fs.stringVar(&o.VersionField, "version-field", "INORDER_VERSION_FIELD", "", "metadata `field` holding the aggregate version (default: stream revision + 1)")
}

func (o *esdbOptions) validate() error {
	if o.URL == "" {
		return usageErrorf("no EventStoreDB: set --esdb-url or $%s", EnvESDBURL)
	}
	if _, err := esdbc.ParseConnectionString(o.URL); err != nil {
		return usageErrorf("invalid --esdb-url: %v", err)
	}
	return nil
}

func (o *esdbOptions) mapping() esdb.Mapping {
	return esdb.Mapping{StreamPrefix: o.StreamPrefix, VersionField: o.VersionField}
}

// config returns cfg with the connection, mapping and filter these flags
// describe: what parked repair and rebuild read with.
func (o *esdbOptions) config(cfg esdb.Config) *esdb.Config {
	cfg.URL, cfg.TypeRegex, cfg.Mapping = o.URL, o.TypeRegex, o.mapping()
	return &cfg
}

// runOptions configures run.
type runOptions struct {
	log          logOptions
	db           dbOptions
	es           esdbOptions
	http         httpOptions
	Mode         string
	Name         string
	Group        string
	Stream       string
	Workers      int
	BatchSize    int
	MaxWait      time.Duration
	BufferSize   int
	FromEnd      bool
	RepairAfter  time.Duration
	DrainTimeout time.Duration
	Migrate      bool
}

func (o *runOptions) validate(args []string) error {
	if err := noArgs(args); err != nil {
		return err
	}
	for _, v := range []interface{ validate() error }{&o.log, &o.db, &o.es, &o.http} {
		if err := v.validate(); err != nil {
			return err
		}
	}
	switch o.Mode {
	case ModeCatchUp:
		if o.Stream != "" {
			return usageErrorf("--stream needs --mode persistent")
		}
	case ModePersistent:
		if o.Group == "" {
			return usageErrorf("--group must not be empty")
		}
	default:
		return usageErrorf("--mode must be %s or %s, not %q", ModeCatchUp, ModePersistent, o.Mode)
	}
	switch {
	case o.Name == "":
		return usageErrorf("--name must not be empty")
	case o.Workers < 1:
		return usageErrorf("--workers must be at least 1")
	case o.BatchSize < 1:
		return usageErrorf("--batch-size must be at least 1")
	case o.MaxWait <= 0:
		return usageErrorf("--max-wait must be positive")
	case o.BufferSize < 0:
		return usageErrorf("--buffer-size must not be negative")
	case o.DrainTimeout <= 0:
		return usageErrorf("--drain-timeout must be positive")
	}
	return nil
}

// runCmd runs the projection workers.
type runCmd struct{ a *app }

func (c *runCmd) command() *command {
	return leaf("run", "", "run the projection workers against EventStoreDB",
		`Consumes EventStoreDB and applies every event to the projections through
the version gate, with --workers workers per process (aggregates are
partitioned across them by hash), batching up to --batch-size events per
transaction (waiting at most --max-wait for a batch to fill).

Modes:
  catch-up    (default) a catch-up subscription to $all, filtered by
              --stream-prefix / --type-regex; the position is checkpointed in
              Postgres (row --name) in the same transaction as the writes.
  persistent  one consumer of the persistent subscription --group (to $all,
              or to --stream such as $ce-payment), created if missing; any
              number of processes compete for its events. Deliveries arrive
              out of order and duplicated: the gate absorbs both.

Any number of processes may run side by side on one schema, in either mode:
the gate serialises them per aggregate. (Two catch-up processes with the same
--name share one checkpoint and both read everything: give each its own
--name, or use persistent mode to share the work.)

Gap repair: aggregates whose parked events waited longer than
--repair-after get their missing versions read from their stream.

It serves /healthz, /readyz (ready once the workers run), /metrics and the
read-model HTTP API on --http-addr.

The first SIGINT/SIGTERM drains: stop receiving, commit and acknowledge the
batches in flight, save the checkpoint (at most --drain-timeout). A second
one exits at once; uncommitted batches roll back and are delivered again.

Changes: the projections' read models and inorder's tables in --schema
(versions, parked, quarantine, conflicts, rejected, checkpoints); with
--migrate it first applies pending migrations and creates the read-model
tables. In persistent mode it may create the subscription group.`,
		func(fs *flagSet) *runOptions {
			o := &runOptions{}
			bindLog(fs, &o.log, "info")
			bindDB(fs, &o.db)
			bindESDB(fs, &o.es)
			bindHTTP(fs, &o.http, "127.0.0.1:8080")
			fs.stringVar(&o.Mode, "mode", EnvMode, ModeCatchUp, "`mode`: catch-up or persistent")
			fs.stringVar(&o.Name, "name", EnvSourceName, esdb.DefaultName, "source `name`: its checkpoint row, and the source recorded with rejected events")
			fs.stringVar(&o.Group, "group", EnvGroup, "inorder", "persistent subscription `group`")
			fs.stringVar(&o.Stream, "stream", "INORDER_STREAM", "", "persistent mode: the `stream` the group reads (default $all)")
			fs.intVar(&o.Workers, "workers", EnvWorkers, 4, "workers of this process; aggregates are partitioned across them by hash")
			fs.intVar(&o.BatchSize, "batch-size", EnvBatchSize, 500, "events per transaction, at most")
			fs.durationVar(&o.MaxWait, "max-wait", EnvMaxWait, 50*time.Millisecond, "longest wait for a batch to fill")
			fs.intVar(&o.BufferSize, "buffer-size", "INORDER_BUFFER_SIZE", 0, "persistent mode: unacknowledged events the server may send this process (default workers × batch size)")
			fs.boolVar(&o.FromEnd, "from-end", "INORDER_FROM_END", false, "start at the end of the stream, not its beginning (when there is no checkpoint yet / when creating the group)")
			fs.durationVar(&o.RepairAfter, "repair-after", "INORDER_REPAIR_AFTER", esdb.DefaultRepairAfter, "gap repair: read the missing versions of aggregates parked this long from their stream (negative disables)")
			fs.durationVar(&o.DrainTimeout, "drain-timeout", "INORDER_DRAIN_TIMEOUT", esdb.DefaultDrainTimeout, "longest graceful drain after the first signal")
			fs.boolVar(&o.Migrate, "migrate", "INORDER_MIGRATE", false, "apply pending migrations and create the read-model tables before starting")
			return o
		}, c.Run)
}

// Run runs the workers until the first signal, then drains.
func (c *runCmd) Run(ctx context.Context, o *runOptions) error {
	logger := c.a.logger(&o.log)
	pool, err := connect(ctx, &o.db, int32(o.Workers+6), logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := c.a.prepareSchema(ctx, pool, o.db.Schema, o.Migrate, logger); err != nil {
		return err
	}
	proc, m, closeMetrics, err := c.a.instrumentedProcessor(ctx, pool, &o.db, logger)
	if err != nil {
		return err
	}
	defer closeMetrics()
	if err := proc.Setup(ctx); err != nil {
		return fmt.Errorf("create the read-model tables: %w", err)
	}
	cfg := &esdb.Config{
		URL:          o.es.URL,
		Processor:    proc,
		Name:         o.Name,
		TypeRegex:    o.es.TypeRegex,
		FromEnd:      o.FromEnd,
		Mapping:      o.es.mapping(),
		Workers:      o.Workers,
		BatchSize:    o.BatchSize,
		MaxWait:      o.MaxWait,
		RepairAfter:  o.RepairAfter,
		DrainTimeout: o.DrainTimeout,
		Logger:       logger,
	}
	if o.Mode == ModePersistent {
		cfg.Persistent = &esdb.Persistent{Group: o.Group, Stream: o.Stream, BufferSize: uint32(o.BufferSize)}
	}
	ready := &readiness{}
	ready.set(false, "the workers have not subscribed yet")
	cfg.OnSubscribed = func() { ready.set(true, "") }
	src, err := esdb.New(cfg)
	if err != nil {
		return err
	}
	registerSourceMetrics(m, o.Name, src.Stats)

	var srv *httpServer
	if o.http.Addr != "" {
		if srv, err = startHTTP(&o.http, proc, ready, m.Handler(), logger); err != nil {
			return err
		}
		fmt.Fprintf(c.a.stderr, "serving %s\n", srv.url())
	}
	logger.Info("inorder: workers starting", "mode", o.Mode, "workers", o.Workers, "batch_size", o.BatchSize,
		"projections", strings.Join(proc.Projections(), ","), "schema", o.db.Schema)

	// Run drains when its context ends (the first signal) and stops at
	// once on Abort (the second).
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx) }()
	var httpErr error
	finished := false
	select {
	case err = <-done:
		finished = true
	case <-c.a.drain.Done():
	case <-ctx.Done():
	case httpErr = <-srvErrc(srv):
	}
	if !finished {
		ready.set(false, "draining")
		logger.Info("inorder: draining: finishing the batches in flight (signal again to stop at once)")
		stopRun()
		select {
		case err = <-done:
		case <-ctx.Done():
			src.Abort()
			err = <-done
		}
	}
	if srv != nil {
		if serr := srv.shutdown(5 * time.Second); serr != nil && httpErr == nil {
			httpErr = serr
		}
	}
	st := src.Stats()
	logger.Info("inorder: workers stopped", "received", st.Received, "acked", st.Acked, "batches", st.Batches, "aborted", errors.Is(err, esdb.ErrAborted))
	if err != nil {
		return err
	}
	if httpErr != nil {
		return fmt.Errorf("http: %w", httpErr)
	}
	return nil
}

func srvErrc(s *httpServer) chan error {
	if s == nil {
		return nil
	}
	return s.errc
}

// prepareSchema applies pending migrations when migrate is set; otherwise
// it refuses to start on a schema with pending migrations.
func (a *app) prepareSchema(ctx context.Context, pool *pgxpool.Pool, schema string, migrate bool, logger *slog.Logger) error {
	m, err := migrations.New(pool, &migrations.Options{Schema: schema, Logger: logger})
	if err != nil {
		return err
	}
	if migrate {
		if _, err := m.Migrate(ctx); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		return nil
	}
	pending, err := pendingMigrations(ctx, m)
	if err != nil {
		return err
	}
	if len(pending) > 0 {
		return fmt.Errorf("schema %s has %d pending migrations: run '%s migrate' first (or pass --migrate)", schema, len(pending), a.name)
	}
	return nil
}

// instrumentedProcessor returns a processor whose batches feed the returned
// metrics, served with a small pool of their own.
func (a *app) instrumentedProcessor(ctx context.Context, pool *pgxpool.Pool, o *dbOptions, logger *slog.Logger) (*projection.Processor, *metrics.Metrics, func(), error) {
	var mp atomic.Pointer[metrics.Metrics]
	pc := a.cfg.Processor
	pc.Schema, pc.Logger = o.Schema, logger
	user := pc.OnBatch
	pc.OnBatch = func(b projection.BatchInfo) {
		mp.Load().ObserveBatch(b)
		if user != nil {
			user(b)
		}
	}
	proc, err := projection.New(pool, &pc, a.cfg.Projections...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("processor: %w", err)
	}
	mpool, err := connect(ctx, o, 2, logger)
	if err != nil {
		return nil, nil, nil, err
	}
	gauges, err := projection.New(mpool, &pc, a.cfg.Projections...)
	if err != nil {
		mpool.Close()
		return nil, nil, nil, fmt.Errorf("processor: %w", err)
	}
	m := metrics.New(proc, &metrics.Options{Logger: logger, Gauges: gauges})
	mp.Store(m)
	return proc, m, mpool.Close, nil
}
