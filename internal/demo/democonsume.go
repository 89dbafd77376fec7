package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inorder/inorder/internal/clikit"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/inorder/inorder/source/esdb"
)

// demoGroup is the persistent subscription group the demo's consumers share.
const demoGroup = "inorder-demo"

// consume runs the competing consumers until the whole workload is applied.
func (d *demoRun) consume(ctx context.Context) (demoStats, error) {
	total := int64(len(d.events))
	settings := esdbc.SubscriptionSettingsDefault()
	settings.MessageTimeout = 5000 // ms: a delivery not acked in time goes to another consumer
	settings.MaxRetryCount = 1000  // never park at the server: the gate absorbs redeliveries
	srcs := make([]*esdb.Source, d.o.Consumers)
	for i := range srcs {
		var err error
		srcs[i], err = esdb.New(&esdb.Config{
			URL:       d.esdb.URL(),
			Processor: d.proc,
			Name:      fmt.Sprintf("demo-consumer-%d", i+1),
			Persistent: &esdb.Persistent{Group: demoGroup, Settings: &settings,
				BufferSize: uint32(d.o.Buffer)},
			Workers:      2,
			BatchSize:    d.o.BatchSize,
			MaxWait:      d.o.MaxWait,
			ReconnectMin: 20 * time.Millisecond,
			RepairAfter:  2 * time.Second,
			RepairEvery:  time.Second,
			Logger:       d.logger,
		})
		if err != nil {
			return demoStats{}, fmt.Errorf("demo: consumer: %w", err)
		}
	}
	for _, s := range srcs {
		if err := s.RegisterMetrics(d.metrics.Registry()); err != nil {
			return demoStats{}, fmt.Errorf("demo: %w", err)
		}
	}

	running := runAll(ctx, srcs)
	defer running.stop()

	d.con.Printf([]any{"consumers", len(srcs), "group", demoGroup}, "consuming with %d competing consumers on persistent subscription %q to $all", len(srcs), demoGroup)
	// Drop every subscription twice mid-run, as a network failure would:
	// the deliveries not yet acknowledged go to other consumers again.
	drops := []int64{total / 3, 2 * total / 3}
	elapsed, err := d.await(ctx, awaiting{total: total, stopAll: running.stopAll,
		each: func(events int64, bar *clikit.ProgressBar) {
			if len(drops) > 0 && events >= drops[0] && events < total {
				drops = drops[1:]
				d.esdb.DropSubscriptions()
				bar.Note(fmt.Sprintf("simulated network failure at %d events: every subscription dropped; the consumers reconnect and unacknowledged deliveries come again", events))
			}
		}})
	if err != nil {
		return demoStats{}, err
	}
	return finish(d, running, nil, elapsed, srcs, func(s *esdb.Source) int64 { return s.Stats().Received },
		fmt.Sprintf("%d competing, one persistent subscription", len(srcs)))
}

// serve serves the HTTP API until the first signal and prints examples.
func (d *demoRun) serve(ctx context.Context) error {
	o := &clikit.HTTPOptions{Addr: d.o.HTTPAddr, Token: d.o.HTTPToken, MaxWait: 5 * time.Second}
	serve := clikit.Serve{Processor: d.proc, Effects: d.fx, Ready: clikit.NewReadiness(d.pool, d.o.Schema), Metrics: d.metrics, Logger: d.logger}
	srv, err := clikit.StartHTTP(o, serve)
	if err != nil && d.o.HTTPAddr == clikit.DefaultHTTPAddr && errors.Is(err, syscall.EADDRINUSE) {
		d.con.Printf(nil, "%s is in use; listening on a free port instead", clikit.DefaultHTTPAddr)
		o.Addr = "127.0.0.1:0"
		srv, err = clikit.StartHTTP(o, serve)
	}
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	d.examples(srv.URL())
	select {
	case <-ctx.Done():
	case <-d.a.Drain():
	case err := <-srv.Err():
		return fmt.Errorf("demo: http: %w", err)
	}
	d.con.Printf(nil, "stopping")
	return srv.Shutdown(5 * time.Second)
}

// examples prints curl commands with ids from the workload.
func (d *demoRun) examples(base string) {
	w := &bytes.Buffer{}
	defer d.print(w)
	last := d.events[len(d.events)-1]
	var version int64
	for _, e := range d.events {
		if e.Aggregate == last.Aggregate {
			version = max(version, e.Version)
		}
	}
	auth := ""
	if d.o.HTTPToken != "" {
		auth = "-H 'Authorization: Bearer " + d.o.HTTPToken + "' "
	}
	proj := url.PathEscape(d.proj)
	agg := base + "/v1/projections/" + proj + "/aggregates/" + url.PathEscape(last.Aggregate)
	fmt.Fprintf(w, "\nThe read-model API is serving on %s (Ctrl-C to stop). Try:\n\n", base)
	fmt.Fprintf(w, "  curl -s %s'%s'\n", auth, agg)
	fmt.Fprintf(w, "  curl -si %s'%s?min_version=%d'   # read-your-writes: waits until version %d is applied\n", auth, agg, version, version)
	fmt.Fprintf(w, "  curl -s %s'%s?min_version=%d&timeout=1s'   # not there yet: 504 with the current version\n", auth, agg, version+1)
	list := base + "/v1/projections/" + proj + "/aggregates?limit=3"
	if d.o.demo.Filter != nil {
		if name, value := d.o.demo.Filter(d.events); name != "" {
			list += "&" + url.QueryEscape(name) + "=" + url.QueryEscape(value)
		}
	}
	fmt.Fprintf(w, "  curl -s %s'%s'\n", auth, list)
	fmt.Fprintf(w, "  curl -s %s'%s/v1/status'\n", auth, base)
	fmt.Fprintf(w, "  curl -s '%s/metrics' | grep '^inorder_'\n", base)
	fmt.Fprintf(w, "\nOperator commands on the same data:\n\n")
	if d.o.DatabaseURL != "" {
		fmt.Fprintf(w, "  %s status --schema %s   # with the same $DATABASE_URL\n", d.a.Name(), d.o.Schema)
	} else {
		fmt.Fprintf(w, "  %s status --database-url '%s' --schema %s\n", d.a.Name(), d.dbURL, d.o.Schema)
	}
}

// fleet is the demo's consumers running.
type fleet struct {
	ctx  context.Context // what they run under: the demo's ctx does not cancel it
	stop context.CancelFunc
	wg   sync.WaitGroup
	errs []error // each Run's error, once stopAll returned
}

// runAll runs every source in a goroutine until the demo stops them
// (stopAll, or stop without waiting on an early return).
func runAll[S interface{ Run(context.Context) error }](ctx context.Context, srcs []S) *fleet {
	f := &fleet{errs: make([]error, len(srcs))}
	f.ctx, f.stop = context.WithCancel(context.WithoutCancel(ctx))
	for i, s := range srcs {
		f.wg.Go(func() { f.errs[i] = s.Run(f.ctx) })
	}
	return f
}

// stopAll stops every consumer, waits for them and joins their errors.
func (f *fleet) stopAll() error {
	f.stop()
	f.wg.Wait()
	return errors.Join(f.errs...)
}

// finish stops the consumers and returns the demo's figures: elapsed, the
// processor's counts, what the consumers received (received of each) and
// how they shared the work (consumers). cutOff is what the first consumer's
// Run returns when the demo cut it off halfway (nil: none was), an error
// left out.
func finish[S any](d *demoRun, f *fleet, cutOff error, elapsed time.Duration, srcs []S, received func(S) int64, consumers string) (demoStats, error) {
	err := f.stopAll()
	if cutOff != nil && len(f.errs) > 1 && errors.Is(f.errs[0], cutOff) {
		err = errors.Join(f.errs[1:]...) // the one cut off says so
	}
	if err != nil {
		return demoStats{}, fmt.Errorf("demo: stop the consumers: %w", err)
	}
	var n int64
	for _, s := range srcs {
		n += received(s)
	}
	return demoStats{elapsed: elapsed, counts: d.proc.Counts()[d.proj], received: n, consumers: consumers}, nil
}

// consumers makes --consumers sources with newSource and registers the
// first one's metrics (they share one name: one set of series).
func consumers[S interface {
	RegisterMetrics(prometheus.Registerer) error
}](d *demoRun, newSource func() (S, error)) ([]S, error) {
	srcs := make([]S, d.o.Consumers)
	for i := range srcs {
		var err error
		if srcs[i], err = newSource(); err != nil {
			return nil, fmt.Errorf("demo: consumer: %w", err)
		}
	}
	if err := srcs[0].RegisterMetrics(d.metrics.Registry()); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	return srcs, nil
}
