package cli

import (
	"context"
	"fmt"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"strconv"
	"time"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/source/esdb"
)

// repairOptions configures parked repair.
type repairOptions struct {
	listOptions
	es        esdbOptions
	OlderThan time.Duration
}

func (o *repairOptions) validate(args []string) error {
	switch len(args) {
	case 0:
	case 1:
		if args[0] == "" {
			return clikit.Usagef("empty aggregate")
		}
		o.Aggregate = args[0]
	default:
		return clikit.Usagef("unexpected argument %q", args[1])
	}
	if err := o.check(); err != nil {
		return err
	}
	if o.OlderThan < 0 {
		return clikit.Usagef("--older-than must not be negative")
	}
	if err := o.opOptions.validate(); err != nil {
		return err
	}
	return o.es.Validate()
}

// parkedRepairCmd reads the missing versions of waiting aggregates from
// EventStoreDB.
type parkedRepairCmd struct{ a *App }

func (c *parkedRepairCmd) command() *cobra.Command {
	return leaf("repair [aggregate]", "read the missing versions of waiting aggregates from EventStoreDB, once",
		`Runs gap repair once, now: for the given aggregate, or for every aggregate
with parked events (--older-than, --limit), reads the versions it waits for
straight from its stream (--stream-prefix + aggregate id; mapped like 'run')
and feeds them through the gate, which applies them and drains the parked
events behind them. Versions the stream does not have — deleted, truncated,
never written — are reported, and recorded in the operator log like the
workers do ('gap-missing-at-source'): decide with 'parked declare-gap'.

The workers do the same on their own for aggregates parked longer than
their --repair-after; this command is for not waiting.

Changes: like any delivery, the events read are applied (and the parked
events behind them drained), or parked, or discarded as duplicates; the
operator log gets a row per gap missing at the source, once.`,
		func(fs *pflag.FlagSet) *repairOptions {
			o := &repairOptions{listOptions: listOptions{a: c.a}}
			bindOp(fs, &o.opOptions)
			bindESDB(fs, &o.es)
			fs.StringVar(&o.Projection, "projection", "", "only aggregates waiting in this `projection`")
			fs.DurationVar(&o.OlderThan, "older-than", 0, "only aggregates whose oldest parked event waited at least this `duration`")
			fs.IntVar(&o.Limit, "limit", 100, "at most this many `aggregates`")
			return o
		}, c.Run)
}

// RepairReport is one aggregate of parked repair --json.
type RepairReport struct {
	Aggregate string `json:"aggregate"`
	// From and To are the versions looked for.
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Found is how many of them the stream had; they were processed.
	Found int `json:"found"`
	// Missing lists the versions the stream does not have, as ranges.
	Missing []string `json:"missing,omitempty"`
	// Reason says why the stream had nothing (not found, deleted).
	Reason string `json:"reason,omitempty"`
	// Applied is the aggregate's applied version afterwards, per
	// projection.
	Applied map[string]int64 `json:"applied"`
}

// Run repairs.
func (c *parkedRepairCmd) Run(ctx context.Context, o *repairOptions) error {
	proc, closeFn, err := c.a.open(ctx, &o.opOptions)
	if err != nil {
		return err
	}
	defer closeFn()
	src, err := esdb.New(o.es.config(esdb.Config{Processor: proc, Name: "repair", Logger: o.log.Logger(c.a.stderr)}))
	if err != nil {
		return err
	}
	repairs, err := src.RepairNow(ctx, &esdb.RepairOptions{Projection: o.Projection, Aggregate: o.Aggregate, OlderThan: o.OlderThan, Limit: o.Limit})
	if err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	reports := make([]RepairReport, 0, len(repairs))
	for _, r := range repairs {
		rep := RepairReport{Aggregate: r.Aggregate, From: r.From, To: r.To, Found: r.Found, Reason: r.Reason, Applied: map[string]int64{}}
		for _, a := range r.Absent {
			rep.Missing = append(rep.Missing, a.String())
		}
		for _, name := range proc.Projections() {
			if rep.Applied[name], err = proc.Version(ctx, name, r.Aggregate); err != nil {
				return err
			}
		}
		reports = append(reports, rep)
	}
	if o.out.JSON {
		return clikit.WriteJSON(c.a.stdout, reports)
	}
	if len(reports) == 0 {
		fmt.Fprintln(c.a.stdout, "no aggregate is waiting")
		return nil
	}
	t := clikit.NewTable(c.a.stdout, "AGGREGATE", "LOOKED FOR", "FOUND", "MISSING AT SOURCE", "APPLIED NOW")
	for _, r := range reports {
		missing := "-"
		if len(r.Missing) > 0 {
			missing = fmt.Sprint(r.Missing)
			if r.Reason != "" {
				missing += " (" + r.Reason + ")"
			}
		}
		var applied string
		for _, name := range proc.Projections() {
			if applied != "" {
				applied += " "
			}
			applied += name + "=" + strconv.FormatInt(r.Applied[name], 10)
		}
		t.Row(r.Aggregate, fmt.Sprintf("%d-%d", r.From, r.To), r.Found, missing, applied)
	}
	return t.Flush()
}
