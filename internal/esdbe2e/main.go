// Command esdbe2e measures inorder end to end against EventStoreDB's
// protocol: an in-memory EventStoreDB server (package esdbtest) in a process
// of its own holding a ledger workload, and one or more 'inorder run'
// processes consuming it into a fresh schema, in catch-up or persistent
// mode. It reports the time from the start of the workers until every
// event is applied, events per second, and the peak RSS of each process,
// then checks that the read model equals the in-order fold of the workload
// (exit status 1 if not).
//
//	go build -o /tmp/inorder ./cmd/inorder
//	go run ./internal/esdbe2e -inorder /tmp/inorder -events 100000 -mode persistent -consumers 2
//
// The schema is dropped at the end (-keep keeps it). Progress is read from
// the workers' /metrics (inorder_events_total and inorder_drained_total), so
// measuring costs the database nothing. See docs/benchmarks.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/inorder/inorder/internal/e2eproc"
	"github.com/inorder/inorder/source/esdb/esdbtest"
)

const streamPrefix = "payment-"

// serverVersion is the version the server reports by default: the
// KurrentDB release docker-compose.yml pins, on which 'inorder run' creates
// its persistent groups with the Pinned strategy.
const serverVersion = "26.0.3"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		os.Exit(serve(os.Args[2:]))
	}
	os.Exit(orchestrate(os.Args[1:]))
}

// serve runs the EventStoreDB server with the workload appended, prints
// "url <connection string>" once it is ready, and serves until SIGTERM or
// SIGINT.
func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	events := fs.Int("events", 100000, "events")
	versions := fs.Int("versions", 8, "versions per payment")
	seed := fs.Uint64("seed", 1, "workload seed")
	version := fs.String("server-version", serverVersion, "the server version reported to clients")
	_ = fs.Parse(args)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv, err := esdbtest.Start(&esdbtest.Options{MessageTimeout: 30 * time.Second, Version: *version})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Close()
	for _, ev := range e2eproc.Workload(*seed, *events, *versions) {
		if _, err := srv.Append(streamPrefix+ev.Aggregate, esdbtest.Event{Type: ev.Type, Data: ev.Data, Metadata: ev.Metadata}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Printf("url %s\n", srv.URL())
	<-ctx.Done()
	return 0
}

type options struct {
	e2eproc.Flags
	mode, serverVersion string
}

func orchestrate(args []string) int {
	var o options
	fs := flag.NewFlagSet("esdbe2e", flag.ExitOnError)
	o.Bind(fs, "inorder run processes (persistent mode: competing consumers of one group)", "events (payments × versions)",
		"more flags for 'inorder run', space separated (--buffer-size 2000 …)")
	fs.StringVar(&o.mode, "mode", "catch-up", "catch-up or persistent")
	fs.StringVar(&o.serverVersion, "server-version", serverVersion, "the server version reported to clients (26.0.3: 'inorder run' creates Pinned groups; 25.1.4: RoundRobin)")
	_ = fs.Parse(args)
	if o.Missing("esdbe2e") {
		return 2
	}
	if err := run(&o); err != nil {
		fmt.Fprintln(os.Stderr, "esdbe2e:", err)
		return 1
	}
	return 0
}

func run(o *options) error {
	ctx, schema, end, err := e2eproc.Begin(o.Timeout, o.DatabaseURL, "e2e", o.Keep)
	if err != nil {
		return err
	}
	defer end()

	fmt.Fprintf(os.Stderr, "esdbe2e: appending %d events to the server process…\n", o.Events)
	server, esdbURL, err := e2eproc.StartServe("server", "url ", "-events", strconv.Itoa(o.Events), "-versions", strconv.Itoa(o.Versions),
		"-seed", strconv.FormatUint(o.Seed, 10), "-server-version", o.serverVersion)
	if err != nil {
		return err
	}

	env := append(os.Environ(), "DATABASE_URL="+schema.URL, "INORDER_SCHEMA="+schema.Name, "ESDB_URL="+esdbURL,
		"INORDER_STREAM_PREFIX="+streamPrefix, "INORDER_LOG_LEVEL=warn")
	if err := e2eproc.Migrate(o.Inorder, env); err != nil {
		_, _ = server.Stop()
		return err
	}

	args := []string{"--migrate", "--mode", o.mode, "--workers", strconv.Itoa(o.Workers), "--batch-size", strconv.Itoa(o.BatchSize),
		"--group", "e2e-" + schema.Name, "--repair-after", "-1s"}
	workers := e2eproc.NewGroup(o.Inorder, env, append(args, strings.Fields(o.Extra)...)...)
	workers.Each = func(i int) []string { return []string{"--name", fmt.Sprintf("e2e-%d", i)} }
	stopAll := workers.Stop
	began := time.Now()
	if err := workers.Start(o.Consumers); err != nil {
		_, _ = stopAll()
		_, _ = server.Stop()
		return err
	}

	// Wait until every event is applied.
	events := e2eproc.Workload(o.Seed, o.Events, o.Versions)
	want := float64(len(events))
	err = e2eproc.Poll(ctx, 100*time.Millisecond, workers.Exited, func() (bool, error) {
		var applied float64
		for _, p := range workers.Procs {
			applied += e2eproc.Scrape(p.Metrics, "inorder_events_total", "applied") + e2eproc.Scrape(p.Metrics, "inorder_drained_total", "")
		}
		return applied >= want, nil
	})
	took := time.Since(began)
	if err != nil {
		_, _ = stopAll()
		_, _ = server.Stop()
		return err
	}
	// The source's batch figures, read before the workers stop.
	var src sourceFigures
	for _, p := range workers.Procs {
		src.add(scrapeSource(p.Metrics))
	}
	rss, err := stopAll()
	if err != nil {
		_, _ = server.Stop()
		return err
	}
	serverRSS, err := server.Stop()
	if err != nil {
		return err
	}

	// The read model must be the in-order fold.
	led, err := e2eproc.OpenLedger(ctx, schema)
	if err != nil {
		return err
	}
	defer led.Close()
	verified, err := led.Verify(ctx, events)
	if err != nil {
		return err
	}
	fmt.Printf("mode=%s consumers=%d workers=%d batch=%d events=%d seconds=%.2f events/s=%.0f peak-rss-MiB=%s server-rss-MiB=%.0f verified=%v\n",
		o.mode, o.Consumers, o.Workers, o.BatchSize, len(events), took.Seconds(), float64(len(events))/took.Seconds(),
		e2eproc.MiB(rss), serverRSS, verified)
	fmt.Printf("source: window=%.0f batches=%.0f (full %.0f, window %.0f, max_wait %.0f, flush %.0f, retry %.0f) mean-fill=%.2f worker-wait-s idle=%.1f filling=%.1f (summed over %d workers × %d processes, %.1f s each)\n",
		src.window, src.batches(), src.closed["full"], src.closed["window"], src.closed["max_wait"], src.closed["flush"], src.closed["retry"],
		src.meanFill(), src.idle, src.filling, o.Workers, o.Consumers, took.Seconds())
	if !verified {
		return errors.New("the read model differs from the in-order fold")
	}
	return nil
}

// sourceFigures are the source's batch metrics (package source/esdb's
// collector), summed over processes: inorder_source_window_events,
// inorder_source_batches_total by reason, inorder_source_batch_fill_ratio
// and inorder_source_worker_wait_seconds_total by state.
type sourceFigures struct {
	window, fillSum, fillCount, idle, filling float64
	closed                                    map[string]float64
}

func (f *sourceFigures) add(g sourceFigures) {
	f.window += g.window
	f.fillSum += g.fillSum
	f.fillCount += g.fillCount
	f.idle += g.idle
	f.filling += g.filling
	if f.closed == nil {
		f.closed = map[string]float64{}
	}
	for k, v := range g.closed {
		f.closed[k] += v
	}
}

func (f *sourceFigures) batches() float64 {
	var n float64
	for _, v := range f.closed {
		n += v
	}
	return n
}

func (f *sourceFigures) meanFill() float64 {
	if f.fillCount == 0 {
		return 0
	}
	return f.fillSum / f.fillCount
}

// scrapeSource reads a worker's source metrics; zero values when it does
// not answer.
func scrapeSource(u string) sourceFigures {
	out := sourceFigures{closed: map[string]float64{}}
	resp, err := http.Get(u)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return out
	}
	for _, m := range fams["inorder_source_window_events"].GetMetric() {
		out.window += m.GetGauge().GetValue()
	}
	for _, m := range fams["inorder_source_batches_total"].GetMetric() {
		out.closed[labelOf(m.GetLabel(), "reason")] += m.GetCounter().GetValue()
	}
	for _, m := range fams["inorder_source_batch_fill_ratio"].GetMetric() {
		out.fillSum += m.GetHistogram().GetSampleSum()
		out.fillCount += float64(m.GetHistogram().GetSampleCount())
	}
	for _, m := range fams["inorder_source_worker_wait_seconds_total"].GetMetric() {
		switch labelOf(m.GetLabel(), "state") {
		case "idle":
			out.idle += m.GetCounter().GetValue()
		case "filling":
			out.filling += m.GetCounter().GetValue()
		}
	}
	return out
}

// labelOf returns the value of a metric's label name, "" if it has none.
func labelOf[L interface {
	GetName() string
	GetValue() string
}](labels []L, name string) string {
	for _, l := range labels {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
