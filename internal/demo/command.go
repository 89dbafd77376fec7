package demo

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
	"github.com/spf13/cobra"
)

// This file holds the demo command and its run, step by step: the
// database (demo.go), the source and its consumers (democonsume.go,
// demopg.go, demonats.go), the verification, the effects (effects.go) and
// the HTTP API.

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
