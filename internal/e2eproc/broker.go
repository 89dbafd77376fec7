package e2eproc

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
)

// Broker describes a broker end-to-end command (kafkae2e, natse2e): the
// broker runs in a child process of the command itself ('<command> serve')
// holding the workload, and 'inorder run' processes consume it as one group.
type Broker struct {
	// Command is the command's name, in messages and the schema's name.
	Command string
	// Server names the broker's process ("brokers", "nats server"); it
	// prints one line "<Prefix><address>" once it holds the workload.
	Server, Prefix string
	// Loading says what the broker's process does first ("producing").
	Loading string
	// Shared says how the workers share the stream ("one group").
	Shared string
	// Source returns the workers' --source for the broker at address and
	// a group or consumer named name.
	Source func(address, name string) string
	// RunArgs are more flags for every 'inorder run'.
	RunArgs []string
	// Start starts the broker in its process ('serve -events N -versions V
	// -seed S') with the workload loaded, and returns its address and its
	// stop.
	Start func(ctx context.Context, events []aggregate.Event) (address string, stop func(), err error)
}

// Main runs the command: the broker's process when the first argument is
// "serve", else the orchestration. It exits.
func (b *Broker) Main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(b.serve(os.Args[2:]))
	}
	os.Exit(b.orchestrate(os.Args[1:]))
}

// Workload is the ledger workload of the end-to-end commands: events
// events of versions versions per payment, from seed.
func Workload(seed uint64, events, versions int) []aggregate.Event {
	return ledger.Generate(rand.New(rand.NewPCG(seed, seed*7+1)), max(events/versions, 1), versions)
}

// serve runs the broker's process: it starts the broker with the workload
// of its flags, prints "<Prefix><address>" once it is ready, and serves
// until SIGTERM or SIGINT.
func (b *Broker) serve(args []string) int {
	events, versions, seed := ServeFlags(args)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	address, stopBroker, err := b.Start(ctx, Workload(seed, events, versions))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer stopBroker()
	fmt.Printf("%s%s\n", b.Prefix, address)
	<-ctx.Done()
	return 0
}

// ServeFlags parses the broker process's flags.
func ServeFlags(args []string) (events, versions int, seed uint64) {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	e := fs.Int("events", 100000, "events")
	v := fs.Int("versions", 8, "versions per payment")
	s := fs.Uint64("seed", 1, "workload seed")
	_ = fs.Parse(args)
	return *e, *v, *s
}

type brokerOptions struct {
	Flags
	rebalance bool
}

func (b *Broker) orchestrate(args []string) int {
	var o brokerOptions
	fs := flag.NewFlagSet(b.Command, flag.ExitOnError)
	o.Bind(fs, "inorder run processes, "+b.Shared, "events (payments × versions)", "more flags for 'inorder run', space separated")
	fs.BoolVar(&o.rebalance, "rebalance", false, "one more process joins at half the run and leaves again")
	_ = fs.Parse(args)
	if o.Missing(b.Command) {
		return 2
	}
	if err := b.run(&o); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", b.Command, err)
		return 1
	}
	return 0
}

// Schema is a fresh schema for one run.
type Schema struct {
	// Name is the schema's name, URL the database URL whose search_path
	// is it.
	Name, URL string
	pool      *pgxpool.Pool
	keep      bool
}

// NewSchema creates a schema named prefix_<time> in the database at
// databaseURL; Drop drops it unless keep.
func NewSchema(ctx context.Context, databaseURL, prefix string, keep bool) (*Schema, error) {
	s := &Schema{Name: fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano()), keep: keep}
	u, err := url.Parse(databaseURL)
	if err != nil {
		return nil, err
	}
	q := u.Query()
	q.Set("search_path", s.Name)
	u.RawQuery = q.Encode()
	s.URL = u.String()
	if s.pool, err = pgxpool.New(ctx, databaseURL); err != nil {
		return nil, err
	}
	if _, err := s.pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{s.Name}.Sanitize()); err != nil {
		s.pool.Close()
		return nil, err
	}
	return s, nil
}

// Poll calls done every interval until it reports true (nil) or an error
// (that error). It fails when ctx ends ("timed out") or when exited reports
// that a process exited (its error), checked before each call of done.
func Poll(ctx context.Context, interval time.Duration, exited func() error, done func() (bool, error)) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return errors.New("timed out")
		case <-tick.C:
		}
		if err := exited(); err != nil {
			return err
		}
		if ok, err := done(); ok || err != nil {
			return err
		}
	}
}

// Begin returns the context of an orchestrator's run, bounded by timeout,
// and a schema of its own in the database at databaseURL (NewSchema); end
// drops the schema (unless keep) and cancels the context.
func Begin(timeout time.Duration, databaseURL, prefix string, keep bool) (ctx context.Context, s *Schema, end func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	if s, err = NewSchema(ctx, databaseURL, prefix, keep); err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, s, func() { s.Drop(); cancel() }, nil
}

// Drop drops the schema (unless kept) and closes its connections.
func (s *Schema) Drop() {
	if !s.keep {
		_, _ = s.pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{s.Name}.Sanitize()+" CASCADE")
	}
	s.pool.Close()
}

// Group is a set of 'inorder run' processes.
type Group struct {
	// Procs are the processes started and not stopped.
	Procs []*Proc
	// Each, if set, gives more flags for the i-th process Start starts.
	Each func(i int) []string
	bin  string
	env  []string
	args []string
}

// NewGroup returns a group of 'inorder run args…' processes of the binary
// bin, with env, each serving its /metrics on a port of its own.
func NewGroup(bin string, env []string, args ...string) *Group {
	return &Group{bin: bin, env: env, args: args}
}

// Spawn starts one more process, with more flags, not in Procs.
func (g *Group) Spawn(name string, more ...string) (*Proc, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	args := append(append([]string{"run"}, g.args...), more...)
	cmd := exec.Command(g.bin, append(args, "--http-addr", fmt.Sprintf("127.0.0.1:%d", port))...)
	cmd.Env, cmd.Stdout = g.env, io.Discard
	p, err := Start(name, cmd)
	if err != nil {
		return nil, err
	}
	p.Metrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	return p, nil
}

// Start starts n processes into Procs.
func (g *Group) Start(n int) error {
	for i := range n {
		var more []string
		if g.Each != nil {
			more = g.Each(i)
		}
		p, err := g.Spawn(fmt.Sprintf("inorder run %d", i), more...)
		if err != nil {
			return err
		}
		g.Procs = append(g.Procs, p)
	}
	return nil
}

// Exited returns the error of a process of Procs that exited, nil while
// every one runs.
func (g *Group) Exited() error {
	for _, p := range g.Procs {
		select {
		case err := <-p.Done():
			return fmt.Errorf("%s exited: %v", p.Name, err)
		default:
		}
	}
	return nil
}

// Stop stops every process of Procs and returns their peak RSS in MiB.
func (g *Group) Stop() ([]float64, error) {
	var rss []float64
	var errs []error
	for _, p := range g.Procs {
		r, err := p.Stop()
		rss = append(rss, r)
		errs = append(errs, err)
	}
	g.Procs = nil
	return rss, errors.Join(errs...)
}

// Migrate runs 'inorder migrate' with env.
func Migrate(bin string, env []string) error {
	migrate := exec.Command(bin, "migrate")
	migrate.Env, migrate.Stdout, migrate.Stderr = env, io.Discard, os.Stderr
	if err := migrate.Run(); err != nil {
		return fmt.Errorf("inorder migrate: %w", err)
	}
	return nil
}

// Ledger reads the ledger's gate and read model in a schema.
type Ledger struct {
	pool *pgxpool.Pool
	gate *projection.Processor
}

// OpenLedger opens the ledger of the schema s.
func OpenLedger(ctx context.Context, s *Schema) (*Ledger, error) {
	pool, err := pgxpool.New(ctx, s.URL) // search_path: the read model's tables
	if err != nil {
		return nil, err
	}
	gate, err := projection.New(pool, &projection.Config{Schema: s.Name}, ledger.New(nil))
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &Ledger{pool: pool, gate: gate}, nil
}

// Close closes its connections.
func (l *Ledger) Close() { l.pool.Close() }

// Applied returns the events the gate applied (its status), 0 if unknown:
// it counts what processes that are gone applied too.
func (l *Ledger) Applied(ctx context.Context) int64 {
	st, err := l.gate.Status(ctx, nil)
	if err != nil || len(st.Projections) == 0 {
		return 0
	}
	return st.Projections[0].Events
}

// Verify reports whether the read model equals the in-order fold of
// events.
func (l *Ledger) Verify(ctx context.Context, events []aggregate.Event) (bool, error) {
	want, err := ledger.Fold(events)
	if err != nil {
		return false, err
	}
	got, err := ledger.New(nil).Load(ctx, l.pool)
	if err != nil {
		return false, err
	}
	return reflect.DeepEqual(want, got), nil
}

// MiB formats peak RSS figures as "a/b/c".
func MiB(rss []float64) string {
	text := make([]string, len(rss))
	for i, r := range rss {
		text[i] = fmt.Sprintf("%.0f", r)
	}
	return strings.Join(text, "/")
}

func (b *Broker) run(o *brokerOptions) error {
	ctx, schema, end, err := Begin(o.Timeout, o.DatabaseURL, b.Command, o.Keep)
	if err != nil {
		return err
	}
	defer end()

	fmt.Fprintf(os.Stderr, "%s: %s %d events in the %s's process…\n", b.Command, b.Loading, o.Events, b.Server)
	server, address, err := StartServe(b.Server, b.Prefix, "-events", strconv.Itoa(o.Events), "-versions", strconv.Itoa(o.Versions), "-seed", strconv.FormatUint(o.Seed, 10))
	if server != nil {
		defer func() { _, _ = server.Stop() }()
	}
	if err != nil {
		return err
	}
	source := b.Source(address, "e2e-"+schema.Name)

	env := append(os.Environ(), "DATABASE_URL="+schema.URL, "INORDER_SCHEMA="+schema.Name, "INORDER_SOURCE="+source, "INORDER_LOG_LEVEL=warn")
	if err := Migrate(o.Inorder, env); err != nil {
		return err
	}
	args := append([]string{"--workers", strconv.Itoa(o.Workers), "--batch-size", strconv.Itoa(o.BatchSize)}, b.RunArgs...)
	workers := NewGroup(o.Inorder, env, append(args, strings.Fields(o.Extra)...)...)
	defer func() { _, _ = workers.Stop() }()
	began := time.Now()
	if err := workers.Start(o.Consumers); err != nil {
		return err
	}

	events := Workload(o.Seed, o.Events, o.Versions)
	want := int64(len(events))
	led, err := OpenLedger(ctx, schema)
	if err != nil {
		return err
	}
	defer led.Close()
	var extra *Proc
	var extraRSS, parkedAtRebalance float64
	err = Poll(ctx, 250*time.Millisecond, workers.Exited, func() (bool, error) {
		applied := led.Applied(ctx)
		if o.rebalance && extra == nil && applied < want && applied >= want/2 {
			before := Parked(workers.Procs)
			var err error
			if extra, err = workers.Spawn("inorder run (joining)"); err != nil {
				return false, err
			}
			time.Sleep(3 * time.Second) // it joins, takes its share, works a while
			joinerParked := Parked([]*Proc{extra})
			if extraRSS, err = extra.Stop(); err != nil {
				return false, err
			}
			parkedAtRebalance = Parked(workers.Procs) - before + joinerParked
		}
		return applied >= want, nil
	})
	took := time.Since(began)
	if err != nil {
		return err
	}
	parked := Parked(workers.Procs)
	rss, err := workers.Stop()
	if err != nil {
		return err
	}
	verified, err := led.Verify(ctx, events)
	if err != nil {
		return err
	}
	fmt.Printf("consumers=%d workers=%d batch=%d events=%d seconds=%.2f events/s=%.0f peak-rss-MiB=%s parked=%.0f rebalance=%v parked-by-rebalance=%.0f joiner-rss-MiB=%.0f verified=%v\n",
		o.Consumers, o.Workers, o.BatchSize, len(events), took.Seconds(), float64(len(events))/took.Seconds(),
		MiB(rss), parked, o.rebalance, parkedAtRebalance, extraRSS, verified)
	if !verified {
		return errors.New("the read model differs from the in-order fold")
	}
	return nil
}
