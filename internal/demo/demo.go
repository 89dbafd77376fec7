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
	"strconv"
	"strings"
	"time"

	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/internal/clikit"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/effects"
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

// The sources of --source.
const (
	sourceESDB     = "esdb"
	sourcePostgres = "postgres"
	sourceNATS     = "nats"
)

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
