// Command pgtablee2e measures inorder end to end from a PostgreSQL events
// table: a ledger workload in inorder's own events table (migration 008)
// and one or more 'inorder run --source postgres' processes sharing its
// partitions, into a fresh schema. Two modes:
//
//   - throughput (the default): the workload is written to the table first
//     (COPY, in the table's order), then the processes start; it reports
//     the time from their start until every event is applied, events per
//     second and the peak RSS of each process (its VmHWM, read before it is
//     stopped);
//   - -latency: the processes start on an empty table; once they hold
//     every partition, -writers writers append the workload with
//     Writer.Append at -rate events/s in all (-batch events per
//     transaction; each writer its share of the aggregates) for -duration,
//     and the time from each append's commit until the read model shows
//     its version (polled every -poll) is reported as p50/p90/p99/max.
//
// Both then check that the read model equals the in-order fold of the
// workload (exit status 1 if not).
//
//	go build -o /tmp/inorder ./cmd/inorder
//	go run ./internal/pgtablee2e -inorder /tmp/inorder -events 100000 -consumers 3
//	go run ./internal/pgtablee2e -inorder /tmp/inorder -latency -rate 2000 -duration 30s
//
// The schema is dropped at the end (-keep keeps it). Progress is read from
// the gate's status every 100 ms (the sum of the applied versions). See
// docs/benchmarks.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/e2eproc"
	"github.com/inorder/inorder/source/pgtable"
)

type options struct {
	e2eproc.Flags
	// -latency
	latency              bool
	rate, batch, writers int
	duration, pollPeriod time.Duration
}

func main() {
	var o options
	fs := flag.NewFlagSet("pgtablee2e", flag.ExitOnError)
	o.Bind(fs, "inorder run processes sharing the partitions", "events (payments × versions); with -latency, rate × duration",
		"more flags for 'inorder run', space separated")
	fs.BoolVar(&o.latency, "latency", false, "measure commit-to-read-model latency under a writer appending at -rate")
	fs.IntVar(&o.rate, "rate", 2000, "-latency: events appended per second")
	fs.IntVar(&o.batch, "batch", 10, "-latency: events per append (one transaction)")
	fs.IntVar(&o.writers, "writers", 4, "-latency: concurrent writers, each appending its share of the aggregates")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "-latency: how long the writer appends")
	fs.DurationVar(&o.pollPeriod, "poll", 2*time.Millisecond, "-latency: how often the read model is polled")
	_ = fs.Parse(os.Args[1:])
	if o.Missing("pgtablee2e") {
		os.Exit(2)
	}
	if o.latency {
		o.Events = max(o.rate*int(o.duration/time.Second), o.batch)
	}
	if err := run(&o); err != nil {
		fmt.Fprintln(os.Stderr, "pgtablee2e:", err)
		os.Exit(1)
	}
}

func run(o *options) error {
	ctx, sch, end, err := e2eproc.Begin(o.Timeout, o.DatabaseURL, "pgtablee2e", o.Keep)
	if err != nil {
		return err
	}
	defer end()
	schema := sch.Name
	env := append(os.Environ(), "DATABASE_URL="+sch.URL, "INORDER_SCHEMA="+schema, "INORDER_SOURCE=postgres", "INORDER_LOG_LEVEL=warn")
	if err := e2eproc.Migrate(o.Inorder, env); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, sch.URL) // search_path: the schema's tables
	if err != nil {
		return err
	}
	defer pool.Close()
	events := e2eproc.Workload(o.Seed, o.Events, o.Versions)
	if !o.latency {
		fmt.Fprintf(os.Stderr, "pgtablee2e: writing %d events to %s.events…\n", len(events), schema)
		if err := load(ctx, pool, schema, events); err != nil {
			return err
		}
	}

	group := e2eproc.NewGroup(o.Inorder, env, append([]string{"--workers", strconv.Itoa(o.Workers), "--batch-size", strconv.Itoa(o.BatchSize)},
		strings.Fields(o.Extra)...)...)
	stopAll, exited := group.Stop, group.Exited
	began := time.Now()
	if err := group.Start(o.Consumers); err != nil {
		_, _ = stopAll()
		return err
	}

	led, err := e2eproc.OpenLedger(ctx, sch)
	if err != nil {
		_, _ = stopAll()
		return err
	}
	defer led.Close()
	var lat *latencies
	if o.latency {
		// The writer starts once the processes hold every partition.
		for held(group.Procs) < pgtable.DefaultPartitions {
			if err := exited(); err != nil {
				_, _ = stopAll()
				return err
			}
			if ctx.Err() != nil {
				_, _ = stopAll()
				return errors.New("timed out waiting for the partitions to be held")
			}
			time.Sleep(50 * time.Millisecond)
		}
		fmt.Fprintf(os.Stderr, "pgtablee2e: appending %d events at %d/s in transactions of %d…\n", len(events), o.rate, o.batch)
		began = time.Now()
		if lat, err = appendAndMeasure(ctx, pool, schema, events, o); err != nil {
			_, _ = stopAll()
			return err
		}
	}
	want := int64(len(events))
	err = e2eproc.Poll(ctx, 100*time.Millisecond, exited, func() (bool, error) { return led.Applied(ctx) >= want, nil })
	took := time.Since(began)
	if err != nil {
		_, _ = stopAll()
		return err
	}
	parked := e2eproc.Parked(group.Procs)
	rss, err := stopAll()
	if err != nil {
		return err
	}
	verified, err := led.Verify(ctx, events)
	if err != nil {
		return err
	}
	if o.latency {
		fmt.Printf("mode=latency consumers=%d workers=%d batch=%d events=%d rate=%d/s writers=%d append-batch=%d appended-in=%.2fs samples=%d p50=%s p90=%s p99=%s max=%s poll=%s peak-rss-MiB=%s parked=%.0f verified=%v\n",
			o.Consumers, o.Workers, o.BatchSize, len(events), o.rate, o.writers, o.batch, lat.appended.Seconds(), len(lat.d),
			lat.q(0.50), lat.q(0.90), lat.q(0.99), lat.q(1), o.pollPeriod, e2eproc.MiB(rss), parked, verified)
	} else {
		fmt.Printf("mode=throughput consumers=%d workers=%d batch=%d events=%d seconds=%.2f events/s=%.0f peak-rss-MiB=%s parked=%.0f verified=%v\n",
			o.Consumers, o.Workers, o.BatchSize, len(events), took.Seconds(), float64(len(events))/took.Seconds(),
			e2eproc.MiB(rss), parked, verified)
	}
	if !verified {
		return errors.New("the read model differs from the in-order fold")
	}
	return nil
}

// load writes events to the schema's events table in their order, with
// COPY, 5000 rows per transaction.
func load(ctx context.Context, pool *pgxpool.Pool, schema string, events []aggregate.Event) error {
	for chunk := range slices.Chunk(events, 5000) {
		rows := make([][]any, len(chunk))
		for i, e := range chunk {
			rows[i] = []any{e.Aggregate, e.Version, e.StableID(), e.Type, string(e.Data)}
		}
		if _, err := pool.CopyFrom(ctx, pgx.Identifier{schema, "events"}, []string{"aggregate", "version", "id", "type", "data"}, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("load: %w", err)
		}
	}
	return nil
}

// latencies are the commit-to-read-model times of the appended events.
type latencies struct {
	d        []time.Duration
	appended time.Duration // how long the appends took
}

// q returns the p-quantile (nearest rank).
func (l *latencies) q(p float64) time.Duration {
	if len(l.d) == 0 {
		return 0
	}
	i := int(p*float64(len(l.d))+0.5) - 1
	return l.d[min(max(i, 0), len(l.d)-1)].Round(100 * time.Microsecond)
}

// appendAndMeasure appends events with Writer.Append at o.rate, o.batch per
// transaction, noting when each commit returned, while a poller reads the
// versions of the aggregates with events in flight from the read model
// (ledger_payments.version, the inline ledger's gate) every o.pollPeriod:
// an event's latency runs from its append's commit to the first poll that
// sees its version. It returns once every event was seen.
func appendAndMeasure(ctx context.Context, pool *pgxpool.Pool, schema string, events []aggregate.Event, o *options) (*latencies, error) {
	type key struct {
		agg string
		v   int64
	}
	var mu sync.Mutex
	pending := map[key]time.Time{} // committed, not yet seen
	lat := &latencies{d: make([]time.Duration, 0, len(events))}
	w := pgtable.NewWriter(schema, nil)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// o.writers writers, each appending the aggregates of its own share
	// in order, at o.rate/o.writers: appends of one aggregate never race.
	shares := make([][]aggregate.Event, o.writers)
	for _, e := range events {
		h := fnv.New32a()
		h.Write([]byte(e.Aggregate))
		k := h.Sum32() % uint32(o.writers)
		shares[k] = append(shares[k], e)
	}
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, o.writers)
	for _, share := range shares {
		wg.Go(func() {
			every := time.Duration(float64(time.Second) * float64(o.batch*o.writers) / float64(o.rate))
			for i := 0; len(share) > 0; i++ {
				n := min(o.batch, len(share))
				var chunk []aggregate.Event
				chunk, share = share[:n], share[n:]
				if d := time.Until(began.Add(time.Duration(i) * every)); d > 0 {
					time.Sleep(d)
				}
				if err := w.Append(wctx, pool, chunk...); err != nil {
					errs <- fmt.Errorf("append: %w", err)
					return
				}
				at := time.Now()
				mu.Lock()
				for _, e := range chunk {
					pending[key{e.Aggregate, e.Version}] = at
				}
				mu.Unlock()
			}
		})
	}
	writeErr := make(chan error, 1)
	go func() {
		wg.Wait()
		lat.appended = time.Since(began)
		close(errs)
		writeErr <- <-errs // nil once closed and empty
	}()
	table := pgx.Identifier{schema, "ledger_payments"}.Sanitize()
	writing := true
	tick := time.NewTicker(o.pollPeriod)
	defer tick.Stop()
	for {
		select {
		case err := <-writeErr:
			if err != nil {
				return nil, err
			}
			writing = false
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		mu.Lock()
		aggs := make([]string, 0, len(pending))
		seen := map[string]bool{}
		for k := range pending {
			if !seen[k.agg] {
				seen[k.agg] = true
				aggs = append(aggs, k.agg)
			}
		}
		mu.Unlock()
		if len(aggs) == 0 {
			if !writing {
				break
			}
			continue
		}
		rows, err := pool.Query(ctx, `SELECT payment_id, version FROM `+table+` WHERE payment_id = ANY($1)`, aggs)
		if err != nil {
			return nil, fmt.Errorf("poll: %w", err)
		}
		now := time.Now()
		at := map[string]int64{}
		for rows.Next() {
			var agg string
			var v int64
			if err := rows.Scan(&agg, &v); err != nil {
				rows.Close()
				return nil, fmt.Errorf("poll: %w", err)
			}
			at[agg] = v
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("poll: %w", err)
		}
		mu.Lock()
		for k, t := range pending {
			if v, ok := at[k.agg]; ok && v >= k.v {
				lat.d = append(lat.d, now.Sub(t))
				delete(pending, k)
			}
		}
		mu.Unlock()
	}
	slices.Sort(lat.d)
	return lat, nil
}

// held sums the partitions the processes hold, from their /metrics.
func held(ps []*e2eproc.Proc) int {
	n := 0
	for _, p := range ps {
		n += int(e2eproc.Scrape(p.Metrics, "inorder_source_partitions_held", ""))
	}
	return n
}
