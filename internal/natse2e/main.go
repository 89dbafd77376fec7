// Command natse2e measures inorder end to end from NATS JetStream: an
// in-process NATS server (one node, file storage) in a process of its own
// holding a ledger workload in a stream, and one or more 'inorder run
// --source nats://…' processes consuming it on one durable consumer, into a
// fresh schema. It reports the time from the start of the workers until
// every event is applied, events per second, the peak RSS of each process
// and the events parked (with several processes one aggregate's messages
// are spread over them; with -rebalance, one more process joins at half
// the run and leaves again), then checks that the read model equals the
// in-order fold of the workload (exit status 1 if not).
//
//	go build -o /tmp/inorder ./cmd/inorder
//	go run ./internal/natse2e -inorder /tmp/inorder -events 100000 -consumers 3
//
// The schema is dropped at the end (-keep keeps it). Progress is read from
// the gate's status every 250 ms (the sum of the applied versions), and the
// parked events from the workers' /metrics. See docs/benchmarks.md.
package main

import (
	"bufio"
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
	natsc "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/e2eproc"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/nats"
	"github.com/inorder/inorder/source/nats/natstest"
)

const stream = "PAYMENTS"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(serve(os.Args[2:]))
	}
	os.Exit(orchestrate(os.Args[1:]))
}

func workload(seed uint64, events, versions int) []aggregate.Event {
	return ledger.Generate(rand.New(rand.NewPCG(seed, seed*7+1)), max(events/versions, 1), versions)
}

// serve runs the server with the workload published, prints "nats <url>"
// once it is ready, and serves until SIGTERM or SIGINT.
func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	events := fs.Int("events", 100000, "events")
	versions := fs.Int("versions", 8, "versions per payment")
	seed := fs.Uint64("seed", 1, "workload seed")
	_ = fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	dir, err := os.MkdirTemp("", "natse2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := natstest.Start(natstest.Options{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Shutdown()
	nc, err := natsc.Connect(srv.URL())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"payments.>"}, Storage: jetstream.FileStorage}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	subject := func(e aggregate.Event) string { return "payments." + e.Aggregate }
	all := workload(*seed, *events, *versions)
	for len(all) > 0 {
		n := min(len(all), 5000)
		if _, err := nats.PublishAll(ctx, js, subject, all[:n]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		all = all[n:]
	}
	nc.Close()
	fmt.Printf("nats %s\n", srv.URL())
	<-ctx.Done()
	return 0
}

type options struct {
	inorder, databaseURL, extra string
	events, versions, consumers int
	workers, batchSize          int
	seed                        uint64
	timeout                     time.Duration
	keep, rebalance             bool
}

func orchestrate(args []string) int {
	var o options
	fs := flag.NewFlagSet("natse2e", flag.ExitOnError)
	fs.StringVar(&o.inorder, "inorder", "", "the inorder binary (go build -o … ./cmd/inorder); required")
	fs.StringVar(&o.databaseURL, "database-url", cmpOr(os.Getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "PostgreSQL")
	fs.IntVar(&o.consumers, "consumers", 1, "inorder run processes, one durable consumer")
	fs.IntVar(&o.events, "events", 100000, "events (payments × versions)")
	fs.IntVar(&o.versions, "versions", 8, "versions per payment")
	fs.IntVar(&o.workers, "workers", 4, "--workers of each process")
	fs.IntVar(&o.batchSize, "batch-size", 500, "--batch-size of each process")
	fs.StringVar(&o.extra, "args", "", "more flags for 'inorder run', space separated")
	fs.Uint64Var(&o.seed, "seed", 1, "workload seed")
	fs.BoolVar(&o.rebalance, "rebalance", false, "one more process joins the consumer at half the run and leaves again")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up after")
	fs.BoolVar(&o.keep, "keep", false, "keep the schema")
	_ = fs.Parse(args)
	if o.inorder == "" {
		fmt.Fprintln(os.Stderr, "natse2e: -inorder is required")
		return 2
	}
	if err := run(&o); err != nil {
		fmt.Fprintln(os.Stderr, "natse2e:", err)
		return 1
	}
	return 0
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func run(o *options) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	schema := fmt.Sprintf("natse2e_%d", time.Now().UnixNano())
	pool, err := pgxpool.New(ctx, o.databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return err
	}
	if !o.keep {
		defer func() {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		}()
	}
	u, err := url.Parse(o.databaseURL)
	if err != nil {
		return err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	dbURL := u.String()

	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "natse2e: publishing %d events in the server's process…\n", o.events)
	srvCmd := exec.Command(self, "serve", "-events", strconv.Itoa(o.events), "-versions", strconv.Itoa(o.versions), "-seed", strconv.FormatUint(o.seed, 10))
	out, err := srvCmd.StdoutPipe()
	if err != nil {
		return err
	}
	server, err := e2eproc.Start("nats server", srvCmd)
	if err != nil {
		return err
	}
	defer func() { _, _ = server.Stop() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		return fmt.Errorf("nats server: %w", err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	source := strings.TrimSpace(strings.TrimPrefix(line, "nats ")) + "/" + stream + "?consumer=e2e-" + schema

	env := append(os.Environ(), "DATABASE_URL="+dbURL, "INORDER_SCHEMA="+schema, "INORDER_SOURCE="+source, "INORDER_LOG_LEVEL=warn")
	migrate := exec.Command(o.inorder, "migrate")
	migrate.Env, migrate.Stdout, migrate.Stderr = env, io.Discard, os.Stderr
	if err := migrate.Run(); err != nil {
		return fmt.Errorf("inorder migrate: %w", err)
	}
	spawn := func(i int) (*e2eproc.Proc, error) {
		port, err := e2eproc.FreePort()
		if err != nil {
			return nil, err
		}
		args := []string{"run", "--workers", strconv.Itoa(o.workers), "--batch-size", strconv.Itoa(o.batchSize),
			"--http-addr", fmt.Sprintf("127.0.0.1:%d", port)}
		args = append(args, strings.Fields(o.extra)...)
		cmd := exec.Command(o.inorder, args...)
		cmd.Env, cmd.Stdout = env, io.Discard
		p, err := e2eproc.Start(fmt.Sprintf("inorder run %d", i), cmd)
		if err != nil {
			return nil, err
		}
		p.Metrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
		return p, nil
	}
	var workers []*e2eproc.Proc
	stopAll := func() ([]float64, error) {
		var rss []float64
		var errs []error
		for _, p := range workers {
			r, err := p.Stop()
			rss = append(rss, r)
			errs = append(errs, err)
		}
		return rss, errors.Join(errs...)
	}
	began := time.Now()
	for i := range o.consumers {
		p, err := spawn(i)
		if err != nil {
			_, _ = stopAll()
			return err
		}
		workers = append(workers, p)
	}

	want := int64(len(workload(o.seed, o.events, o.versions)))
	// Completion is read from the gate (the sum of the applied versions):
	// a process that left took its counters with it.
	vpool, err := pgxpool.New(ctx, dbURL) // search_path: the read model's tables
	if err != nil {
		_, _ = stopAll()
		return err
	}
	defer vpool.Close()
	gate, err := projection.New(vpool, &projection.Config{Schema: schema}, ledger.New(nil))
	if err != nil {
		_, _ = stopAll()
		return err
	}
	appliedNow := func() int64 {
		st, err := gate.Status(ctx, nil)
		if err != nil || len(st.Projections) == 0 {
			return 0
		}
		return st.Projections[0].Events
	}
	var took time.Duration
	var extra *e2eproc.Proc
	var extraRSS float64
	var parkedAtRebalance float64
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for took == 0 {
		select {
		case <-ctx.Done():
			_, _ = stopAll()
			return errors.New("timed out")
		case <-tick.C:
		}
		for _, p := range workers {
			select {
			case err := <-p.Done():
				_, _ = stopAll()
				return fmt.Errorf("%s exited: %v", p.Name, err)
			default:
			}
		}
		applied := appliedNow()
		switch {
		case applied >= want:
			took = time.Since(began)
		case o.rebalance && extra == nil && applied >= want/2:
			before := e2eproc.Parked(workers)
			if extra, err = spawn(len(workers)); err != nil {
				_, _ = stopAll()
				return err
			}
			time.Sleep(3 * time.Second) // it joins, pulls, works a while
			joinerParked := e2eproc.Parked([]*e2eproc.Proc{extra})
			if extraRSS, err = extra.Stop(); err != nil {
				_, _ = stopAll()
				return err
			}
			parkedAtRebalance = e2eproc.Parked(workers) - before + joinerParked
		}
	}
	parked := e2eproc.Parked(workers)
	rss, err := stopAll()
	if err != nil {
		return err
	}

	events := workload(o.seed, o.events, o.versions)
	wantModel, err := ledger.Fold(events)
	if err != nil {
		return err
	}
	got, err := ledger.New(nil).Load(ctx, vpool)
	if err != nil {
		return err
	}
	verified := reflect.DeepEqual(wantModel, got)
	rssText := make([]string, len(rss))
	for i, r := range rss {
		rssText[i] = fmt.Sprintf("%.0f", r)
	}
	fmt.Printf("consumers=%d workers=%d batch=%d events=%d seconds=%.2f events/s=%.0f peak-rss-MiB=%s parked=%.0f rebalance=%v parked-by-rebalance=%.0f joiner-rss-MiB=%.0f verified=%v\n",
		o.consumers, o.workers, o.batchSize, len(events), took.Seconds(), float64(len(events))/took.Seconds(),
		strings.Join(rssText, "/"), parked, o.rebalance, parkedAtRebalance, extraRSS, verified)
	if !verified {
		return errors.New("the read model differs from the in-order fold")
	}
	return nil
}
