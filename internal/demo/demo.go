package demo

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/clikit"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/pglocal"
	"github.com/inorder/inorder/metrics"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb/esdbtest"
)

// Workload is what the demo command runs: Ledger is the shipped one.
type Workload struct {
	// Projection names the projection the demo verifies and whose read
	// model the printed curl examples read. Default: the first of the
	// binary's projections.
	Projection string

	// Noun names the aggregates in flags and output ("payments": the
	// --payments flag). Default "aggregates"; --aggregates always works.
	Noun string

	// Generate returns the workload: aggregates aggregates of versions
	// events each, in the order the event store will hold them (each
	// aggregate's versions in order, aggregates interleaved). Each event is
	// appended to the stream named by its aggregate id. Required.
	Generate func(rng *rand.Rand, aggregates, versions int) []aggregate.Event

	// Verify compares the read model, read through q (whose search_path is
	// the demo schema), with the in-order fold of events; it returns nil
	// when they are equal, else an error describing the difference.
	// Required.
	Verify func(ctx context.Context, q projection.Querier, events []aggregate.Event) error

	// Filter, if set, returns a list filter (name and value) the projection
	// declares, for the printed curl examples.
	Filter func(events []aggregate.Event) (name, value string)
	// Effects, if set, are the workload's effects that leave Postgres: the
	// demo performs them against an in-process receiver while it consumes,
	// and checks that the receiver got each expected notification once.
	Effects *Effects
}

// Environment variables of the demo command's own flags.
const (
	EnvDir    = "INORDER_DEMO_DIR"
	EnvSchema = "INORDER_DEMO_SCHEMA"
)

// ErrVerify is wrapped by the error of a demo whose read model does not
// equal the in-order fold of its workload.
var ErrVerify = errors.New("verification failed")

// DefaultSchema is the schema the demo drops and recreates.
const DefaultSchema = "inorder_demo"

// demoSchemaComment marks the schemas the demo created, which it may drop.
const demoSchemaComment = "inorder demo schema: dropped and recreated by every run of the demo command"

// options configures demo.
type options struct {
	log          clikit.LogOptions
	demo         *Workload
	DatabaseURL  string
	DataDir      string
	KeepPostgres bool
	Schema       string
	Aggregates   int
	Versions     int
	Seed         uint64
	Consumers    int
	BatchSize    int
	MaxWait      time.Duration
	Buffer       int
	HTTPAddr     string
	HTTPToken    string
	Source       string
	Exit         bool
	Timeout      time.Duration
}

func (o *options) validate(args []string) error {
	if err := clikit.NoArgs(args); err != nil {
		return err
	}
	if err := o.log.Validate(); err != nil {
		return err
	}
	if o.DatabaseURL != "" {
		if _, err := pgxpool.ParseConfig(o.DatabaseURL); err != nil {
			return clikit.Usagef("invalid --database-url: %s", clikit.Redact(err))
		}
	}
	if o.Schema == "" || len(o.Schema) > 63 {
		return clikit.Usagef("invalid --schema %q", o.Schema)
	}
	if err := cmp.Or(
		clikit.AtLeast(o.noun(), o.Aggregates, 1),
		clikit.AtLeast("versions", o.Versions, 1),
		clikit.AtLeast("consumers", o.Consumers, 1),
		clikit.AtLeast("batch-size", o.BatchSize, 1),
		clikit.Positive("max-wait", o.MaxWait),
		clikit.AtLeast("buffer", o.Buffer, 1),
		clikit.Positive("timeout", o.Timeout),
	); err != nil {
		return err
	}
	if o.Source != sourceESDB && o.Source != sourcePostgres && o.Source != sourceNATS {
		return clikit.Usagef("--source must be %s, %s or %s, not %q", sourceESDB, sourcePostgres, sourceNATS, o.Source)
	}
	return nil
}

func (o *options) noun() string {
	if o.demo.Noun != "" {
		return o.demo.Noun
	}
	return "aggregates"
}

// defaultDir is where the demo keeps its private PostgreSQL cluster.
// As root the cluster runs as user postgres, which cannot reach /root, so
// the directory goes under /var/tmp.
func defaultDir(getenv func(string) string) string {
	if os.Geteuid() == 0 {
		return "/var/tmp/inorder-demo"
	}
	if d := getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "inorder", "demo-pg")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "inorder", "demo-pg")
	}
	return filepath.Join(os.TempDir(), "inorder-demo")
}

// Ledger returns the demo command of the shipped binary, for
// cli.Config.Commands: a payments workload (ledger.Generate) for the ledger
// projection p, verified against ledger.Fold. p must be one of the
// binary's projections.
func Ledger(p *ledger.Projection) func(*cli.App) *cobra.Command {
	return Command(LedgerWorkload(p))
}

// Command returns the demo command running w, for cli.Config.Commands.
func Command(w *Workload) func(*cli.App) *cobra.Command {
	return func(a *cli.App) *cobra.Command {
		noun := w.Noun
		if noun == "" {
			noun = "aggregates"
		}
		o := &options{demo: w}
		cmd := &cobra.Command{Use: "demo", Short: "run the whole pipeline on a generated workload and verify the result",
			Long: `Runs inorder end to end on a machine with nothing configured:

 1. PostgreSQL: --database-url / $DATABASE_URL if set; otherwise a private
    cluster started from the installed PostgreSQL binaries in --data-dir
    (created on first use, stopped on exit unless --keep-postgres);
 2. drops and recreates the demo schema (--schema, default inorder_demo) —
    inorder's tables and the read model both live there — and migrates it;
 3. with --source esdb (the default), starts an in-process EventStoreDB
    (gRPC protocol) on 127.0.0.1 and appends a generated workload
    (--` + noun + ` × --versions events); with --source postgres, appends it
    to inorder's own events table in the demo schema, from 4 concurrent
    writers whose transactions commit out of order, while it is consumed;
    with --source nats, starts an in-process NATS server with JetStream on
    127.0.0.1 and publishes it to a stream (a third of it twice: the
    duplicate window absorbs the copies) while it is consumed;
 4. consumes it with --consumers competing consumers — on one persistent
    subscription, deliveries arrive out of order and duplicated (and every
    subscription is dropped twice); on the events table, the consumers
    share its partitions by leases, and one is cut off halfway, the others
    taking its partitions over; on the NATS stream, the consumers share one
    durable pull consumer and one is cut off halfway, its unacknowledged
    messages going to the others after AckWait — and shows progress (the
    read model's event count) on stderr; meanwhile
    it performs the workload's effects
    that leave Postgres (the ledger's "payment settled" webhooks, package
    effects) against an in-process HTTP receiver that counts deliveries by
    idempotency key and refuses some first deliveries with a 503;
 5. checks that the read model equals the in-order fold of the workload and
    that the receiver got each expected notification once, and prints a
    summary; exits with status 1 if either does not hold;
 6. serves the read-model HTTP API and /metrics on --http-addr, printing
    example curl commands, until Ctrl-C (or exits at once with --exit).

Changes: DROPS the demo schema with everything in it (it refuses to drop an
existing schema that holds tables and was not created by the demo), creates
the PostgreSQL cluster in --data-dir when it has to. Nothing else.`,
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := o.validate(args); err != nil {
					return err
				}
				return run(cmd.Context(), a, o)
			}}
		fs := cmd.Flags()
		clikit.BindLog(fs, &o.log, "error")
		fs.StringVar(&o.DatabaseURL, "database-url", "", "PostgreSQL `URL` to use instead of a private cluster")
		fs.StringVar(&o.DataDir, "data-dir", defaultDir(a.Getenv), "`directory` of the private PostgreSQL cluster")
		clikit.SetEnv(fs, "data-dir", EnvDir)
		fs.BoolVar(&o.KeepPostgres, "keep-postgres", false, "leave the private PostgreSQL cluster running on exit")
		fs.StringVar(&o.Schema, "schema", DefaultSchema, "`schema` the demo drops, recreates and works in")
		clikit.SetEnv(fs, "schema", EnvSchema)
		fs.IntVar(&o.Aggregates, noun, 3000, "number of "+noun+" in the workload")
		if noun != "aggregates" {
			fs.IntVar(&o.Aggregates, "aggregates", 3000, "same as --"+noun)
		}
		fs.IntVar(&o.Versions, "versions", 8, "events per aggregate")
		fs.Uint64Var(&o.Seed, "seed", 1, "random `seed` of the workload (same seed, same workload)")
		fs.IntVar(&o.Consumers, "consumers", 4, "competing consumers on the persistent subscription")
		fs.IntVar(&o.BatchSize, "batch-size", 200, "deliveries per transaction, at most")
		fs.DurationVar(&o.MaxWait, "max-wait", 20*time.Millisecond, "longest wait for a batch to fill")
		for _, f := range []string{"batch-size", "max-wait"} {
			clikit.SetEnv(fs, f, "") // the workers' variables are not the demo's
		}
		fs.IntVar(&o.Buffer, "buffer", 64, "unacknowledged deliveries per consumer (small values make more redeliveries)")
		fs.StringVar(&o.HTTPAddr, "http-addr", clikit.DefaultHTTPAddr, "`address` of the HTTP API and /metrics (port 0 picks a free one)")
		fs.StringVar(&o.HTTPToken, "http-token", "", "bearer `token` the HTTP API requires (default: none)")
		fs.StringVar(&o.Source, "source", sourceESDB, "where the workload's events live: esdb (an in-process EventStoreDB), postgres (inorder's events table) or nats (an in-process NATS JetStream server)")
		clikit.SetEnv(fs, "source", "")
		fs.BoolVar(&o.Exit, "exit", false, "exit after the summary instead of serving the HTTP API")
		fs.BoolVar(&o.Exit, "no-serve", false, "same as --exit")
		fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "give up if the workload is not consumed within this `duration`")
		return cmd
	}
}

// demoRun is the state of one demo run.
type demoRun struct {
	a       *cli.App
	o       *options
	logger  *slog.Logger
	con     *clikit.Console
	dbURL   string // the database, for printing
	pool    *pgxpool.Pool
	proc    *projection.Processor
	metrics *metrics.Metrics
	proj    string
	fx      *effects.Client // the workload's effects, if any
	recv    *receiver       // their in-process receiver
	esdb    *esdbtest.Server
	events  []aggregate.Event
	cleanup []func()
}

// run runs the demo.
func run(ctx context.Context, a *cli.App, o *options) (err error) {
	d := &demoRun{a: a, o: o, logger: o.log.Logger(a.Stderr()), con: clikit.NewConsole(a.Stderr(), &o.log)}
	defer func() {
		for i := len(d.cleanup) - 1; i >= 0; i-- {
			d.cleanup[i]()
		}
	}()
	d.proj = cmp.Or(o.demo.Projection, a.Projections()[0].Name())
	if !slices.ContainsFunc(a.Projections(), func(p projection.Projection) bool { return p.Name() == d.proj }) {
		return fmt.Errorf("demo: the workload's projection %q is not one of the binary's", d.proj)
	}
	if err := d.database(ctx); err != nil {
		return err
	}
	var stats demoStats
	switch o.Source {
	case sourcePostgres:
		stats, err = d.consumeTable(ctx)
	case sourceNATS:
		stats, err = d.consumeNATS(ctx)
	default:
		if err := d.eventStore(); err != nil {
			return err
		}
		stats, err = d.consume(ctx)
	}
	if err != nil {
		return err
	}
	if stats.events, err = d.readModelEvents(ctx); err != nil {
		return err
	}
	verr := o.demo.Verify(ctx, d.pool, d.events)
	d.summary(stats, verr)
	if r := d.awaitEffects(ctx, o.Timeout); r != nil {
		b := &bytes.Buffer{}
		fmt.Fprintf(b, "%-15s%s\n", "notified:", r.line(o.demo.Effects.What))
		d.print(b)
		if r.err != nil && verr == nil {
			verr = r.err
		}
	}
	if verr != nil {
		if !errors.Is(verr, ErrVerify) {
			verr = fmt.Errorf("%w: %w", ErrVerify, verr)
		}
		return verr
	}
	if o.Exit {
		return nil
	}
	return d.serve(ctx)
}

// database connects to (or starts) PostgreSQL and prepares the demo schema.
func (d *demoRun) database(ctx context.Context) error {
	base := d.o.DatabaseURL
	if base == "" {
		d.con.Printf([]any{"dir", d.o.DataDir}, "starting a private PostgreSQL cluster in %s ...", d.o.DataDir)
		cl, err := pglocal.Start(ctx, pglocal.Options{Dir: d.o.DataDir, Logger: d.logger})
		if err != nil {
			return fmt.Errorf("demo: PostgreSQL: %w (set --database-url or $%s to use a running server)", err, clikit.EnvDatabaseURL)
		}
		if !d.o.KeepPostgres {
			d.cleanup = append(d.cleanup, func() {
				sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := cl.Stop(sctx); err != nil {
					d.logger.Warn("stop PostgreSQL", "error", err)
				}
			})
		}
		base = cl.URL()
	}
	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		return fmt.Errorf("demo: database URL: %s", clikit.Redact(err))
	}
	// Everything of the demo — inorder's tables and the read model — lives
	// in the demo schema: set it as search_path on every connection, after
	// whatever the URL set.
	setPath := "SET search_path = " + pgx.Identifier{d.o.Schema}.Sanitize()
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, setPath)
		return err
	}
	cfg.MaxConns = int32(max(8, 2*d.o.Consumers+4))
	if d.o.demo.Effects != nil {
		cfg.MaxConns += 8 // River and the effect attempts
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "inorder-demo"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("demo: database: %w", err)
	}
	d.pool = pool
	d.cleanup = append(d.cleanup, pool.Close)
	if err := d.resetSchema(ctx); err != nil {
		return err
	}
	var closeMetrics func()
	dbo := &clikit.DBOptions{URL: base, Schema: d.o.Schema}
	if d.proc, d.metrics, closeMetrics, err = clikit.InstrumentedProcessor(ctx, pool, dbo, d.a.ProcessorConfig(), d.a.Projections(), clikit.ReadBuild(""), true, d.logger); err != nil {
		return err
	}
	d.cleanup = append(d.cleanup, closeMetrics)
	if err := d.proc.Setup(ctx); err != nil { // inorder's migrations, then the read model
		return fmt.Errorf("demo: migrate and create the read model: %w", err)
	}
	if err := d.startEffects(ctx); err != nil {
		return err
	}
	d.dbURL = base
	d.con.Printf([]any{"schema", d.o.Schema}, "schema %s recreated and migrated", d.o.Schema)
	return nil
}

// resetSchema drops and recreates the demo schema, refusing to drop a
// schema with tables that the demo did not create.
func (d *demoRun) resetSchema(ctx context.Context) error {
	var comment *string
	var tables int64
	err := d.pool.QueryRow(ctx, `SELECT obj_description(n.oid, 'pg_namespace'),
  (SELECT count(*) FROM pg_class c WHERE c.relnamespace = n.oid)
FROM pg_namespace n WHERE n.nspname = $1`, d.o.Schema).Scan(&comment, &tables)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("demo: inspect schema %s: %w", d.o.Schema, err)
	case tables > 0 && (comment == nil || *comment != demoSchemaComment):
		return fmt.Errorf("demo: schema %s holds %d tables and was not created by the demo; refusing to drop it (choose another --schema)", d.o.Schema, tables)
	}
	ident := pgx.Identifier{d.o.Schema}.Sanitize()
	b := &pgx.Batch{}
	b.Queue(`DROP SCHEMA IF EXISTS ` + ident + ` CASCADE`)
	b.Queue(`CREATE SCHEMA ` + ident)
	b.Queue(`COMMENT ON SCHEMA ` + ident + ` IS '` + demoSchemaComment + `'`)
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
	if err != nil {
		return fmt.Errorf("demo: recreate schema %s: %w", d.o.Schema, err)
	}
	return nil
}

// eventStore starts the in-process EventStoreDB and appends the workload.
func (d *demoRun) eventStore() error {
	srv, err := esdbtest.Start(&esdbtest.Options{Addr: "127.0.0.1:0", Logger: d.logger})
	if err != nil {
		return fmt.Errorf("demo: EventStoreDB: %w", err)
	}
	d.esdb = srv
	d.cleanup = append(d.cleanup, srv.Close)
	d.events = d.workload()
	bar := clikit.NewProgressBar(d.con, "appending", "events", int64(len(d.events)))
	for i, e := range d.events {
		ev := esdbtest.Event{ID: demoEventID(e), Type: e.Type, Data: e.Data, Metadata: e.Metadata}
		if _, err := srv.Append(e.Aggregate, ev); err != nil {
			return fmt.Errorf("demo: append: %w", err)
		}
		bar.Update(int64(i + 1))
	}
	bar.Finish(int64(len(d.events)))
	d.con.Printf([]any{"events", len(d.events), "url", srv.URL()}, "appended %d events of %d %s to the in-process EventStoreDB at %s",
		len(d.events), d.o.Aggregates, d.o.noun(), srv.URL())
	return nil
}

// workload generates the workload of --seed.
func (d *demoRun) workload() []aggregate.Event {
	rng := rand.New(rand.NewPCG(d.o.Seed, d.o.Seed^0x9e3779b97f4a7c15))
	return d.o.demo.Generate(rng, d.o.Aggregates, d.o.Versions)
}

// print writes what the demo shows on stdout: as it is, or with JSON logs
// one JSON object per non-empty line, so every line of output is JSON.
func (d *demoRun) print(b *bytes.Buffer) {
	if !d.con.JSON() {
		_, _ = d.a.Stdout().Write(b.Bytes())
		return
	}
	out := clikit.NewConsole(d.a.Stdout(), &d.o.log)
	for line := range strings.Lines(b.String()) {
		if line = strings.TrimSpace(line); line != "" {
			out.Printf(nil, "%s", line)
		}
	}
}

// demoEventID derives an event's UUID from the fact (aggregate and
// version), so the same workload always has the same ids.
func demoEventID(e aggregate.Event) uuid.UUID {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("inorder-demo:"+e.Aggregate+":"+strconv.FormatInt(e.Version, 10)))
}

// demoStats is what consume measured.
type demoStats struct {
	elapsed time.Duration
	// events is the read model's event count (the sum of its applied
	// versions); counts are the processor's counters, whose Applied misses
	// the batches that committed unheard (see await).
	events   int64
	counts   projection.Counts
	received int64 // deliveries received by the consumers
	// consumers says how they consumed.
	consumers string
}

// summary prints the demo's results on stdout.
func (d *demoRun) summary(st demoStats, verr error) {
	w := &bytes.Buffer{}
	defer d.print(w)
	c := st.counts
	deliveries := st.received
	rate := 0.0
	if s := st.elapsed.Seconds(); s > 0 {
		rate = float64(len(d.events)) / s
	}
	t := clikit.NewTable(w)
	t.Row("events:", fmt.Sprintf("%d (%d %s x %d versions)", len(d.events), d.o.Aggregates, d.o.noun(), d.o.Versions))
	t.Row("consumers:", st.consumers)
	t.Row("deliveries:", fmt.Sprintf("%d (%d more than events: redelivered)", deliveries, max(deliveries-int64(len(d.events)), 0)))
	applied := fmt.Sprintf("%d (%d in order on arrival, %d drained from parked)", st.events, c.Deliveries[projection.Applied], c.Drained)
	if unheard := st.events - c.Applied(); unheard > 0 {
		applied = fmt.Sprintf("%d (%d in order on arrival, %d drained from parked, %d committed by the consumer cut off before it heard the COMMIT's answer: their redeliveries are among the duplicates)",
			st.events, c.Deliveries[projection.Applied], c.Drained, unheard)
	}
	t.Row("applied:", applied)
	t.Row("parked:", fmt.Sprintf("%d (arrived before their predecessors)", c.Deliveries[projection.Parked]))
	t.Row("duplicates:", c.Deliveries[projection.Duplicate])
	t.Row("conflicts:", c.Deliveries[projection.Conflict])
	t.Row("quarantined:", c.Deliveries[projection.Quarantined])
	t.Row("rejected:", c.Deliveries[projection.Rejected])
	t.Row("transactions:", c.Batches)
	t.Row("throughput:", fmt.Sprintf("%.0f events/s (%d events in %s)", rate, len(d.events), clikit.Age(st.elapsed)))
	_ = t.Flush()
	if verr != nil {
		fmt.Fprintf(w, "NOT verified: %v\n", verr)
		return
	}
	fmt.Fprintln(w, "verified: read model equals the in-order fold")
}
