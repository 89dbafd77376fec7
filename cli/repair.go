package cli

import (
	"context"
	"fmt"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"strings"
	"time"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// repairOptions configures parked repair.
type repairOptions struct {
	listOptions
	src       sourceOptions
	Name      string
	OlderThan time.Duration
	DryRun    bool
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
	if o.AllGenerations {
		return clikit.Usagef("parked repair repairs one generation at a time: --generation N, or the live one")
	}
	if o.OlderThan < 0 {
		return clikit.Usagef("--older-than must not be negative")
	}
	if err := o.opOptions.validate(); err != nil {
		return err
	}
	return o.src.Validate()
}

// parkedRepairCmd reads the missing versions of waiting aggregates from
// EventStoreDB.
type parkedRepairCmd struct{ a *App }

func (c *parkedRepairCmd) command() *cobra.Command {
	cmd := leaf("repair [aggregate]", "read the missing versions of waiting aggregates from the source, once",
		`Runs gap repair once, now: for the given aggregate, or for every aggregate
with parked events (--older-than, --limit), reads the versions it waits for
straight from the source (EventStoreDB: its stream, --stream-prefix +
aggregate id; the events table: its rows; mapped like 'run')
and feeds them through the gate, which applies them and drains the parked
events behind them. Versions the stream does not have — deleted, truncated,
never written — are reported, and recorded in the operator log like the
workers do ('gap-missing-at-source'): decide with 'parked declare-gap'.
It then exits with status 3: done, but an operator has to decide. It says
what became of each version it found — applied, or why not (rejected: see
'rejected list'; a duplicate; a conflict) — in OUTCOMES. It repairs the live
generation of the projections, or --generation N.

It reads the source the way the workers do: with the mapping they recorded
in the schema when they started (EventStoreDB: the stream prefix, version
field and type filter), of the one source recorded or of --name; mapping
flags given on the command line (or by their variables) win, with a note
when they differ from the workers'.

The workers do the same on their own for aggregates parked longer than
their --repair-after; this command is for not waiting.

Changes: like any delivery, the events read are applied (and the parked
events behind them drained), or parked, or discarded as duplicates; the
operator log gets a row per gap missing at the source, once. --dry-run
feeds them in transactions it rolls back and records nothing.`,
		func(fs *pflag.FlagSet) *repairOptions {
			o := &repairOptions{listOptions: listOptions{a: c.a}}
			o.bind(fs, 100, "aggregates", "projection", "generation")
			c.a.bindSource(fs, "repair", &o.src)
			fs.StringVar(&o.Name, "name", "", "read the source as the workers of this source `name` do (its recorded mapping); default: the only one recorded")
			fs.DurationVar(&o.OlderThan, "older-than", 0, "only aggregates whose oldest parked event waited at least this `duration`")
			fs.BoolVar(&o.DryRun, "dry-run", false, "change nothing: print what the versions found would become and what is missing")
			return o
		}, c.Run)
	_ = cmd.Flags().MarkHidden("all-generations")
	cmd.SetUsageFunc(clikit.GroupedUsage)
	return cmd
}

// RepairReport is one aggregate of parked repair --json.
type RepairReport struct {
	Aggregate string `json:"aggregate"`
	// From and To are the versions looked for.
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Found is how many of them the stream had; they were processed.
	Found int `json:"found"`
	// Outcomes counts what became of them: applied, parked, duplicate,
	// conflict, quarantined, rejected.
	Outcomes map[string]int `json:"outcomes"`
	// Missing lists the versions the stream does not have, as ranges.
	Missing []string `json:"missing,omitempty"`
	// Reason says why the stream had nothing (not found, deleted).
	Reason string `json:"reason,omitempty"`
	// Before and After are the aggregate's applied version per projection
	// before and after the repair: equal where nothing was applied (and in
	// a dry run).
	Before map[string]int64 `json:"before"`
	After  map[string]int64 `json:"after"`
	DryRun bool             `json:"dry_run,omitempty"`
}

// Run repairs. It fails with ErrIncomplete (exit status 3) when versions
// are missing at the source.
func (c *parkedRepairCmd) Run(ctx context.Context, o *repairOptions) error {
	proc, closeFn, err := c.a.open(ctx, &o.opOptions)
	if err != nil {
		return err
	}
	defer closeFn()
	repairer, ok := o.src.opener.(source.Repairer)
	if !ok {
		return clikit.Usagef("the %s source cannot read an aggregate's missing versions on demand", o.src.title())
	}
	oc := o.src.openConfig(&o.opOptions.db, "", o.log.Logger(c.a.stderr))
	oc.Processor, oc.Name, oc.Note = proc, o.Name, clikit.NewConsole(c.a.stderr, &o.log).Note
	// The versions before, in every projection (a repair feeds them all),
	// to tell what it applied.
	n := len(proc.Projections())
	waiting, err := proc.Waiting(ctx, projection.ListOptions{Aggregate: o.Aggregate, Generation: o.Generation, Limit: max(o.Limit*n, projection.DefaultListLimit)})
	if err != nil {
		return err
	}
	repairs, err := repairer.Repair(ctx, o.src.url, oc, &source.RepairOptions{Projection: o.Projection, Generation: o.Generation, Aggregate: o.Aggregate,
		OlderThan: o.OlderThan, Limit: o.Limit, DryRun: o.DryRun})
	if err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	reports := make([]RepairReport, 0, len(repairs))
	missing := 0
	for _, r := range repairs {
		rep := RepairReport{Aggregate: r.Aggregate, From: r.From, To: r.To, Found: r.Found, Reason: r.Reason, Outcomes: r.Outcomes,
			Before: map[string]int64{}, After: map[string]int64{}, DryRun: o.DryRun}
		if rep.Outcomes == nil {
			rep.Outcomes = map[string]int{}
		}
		rep.Missing = r.Missing
		if len(rep.Missing) > 0 {
			missing++
		}
		for _, name := range proc.Projections() {
			rep.Before[name] = -1
			for _, w := range waiting {
				if w.Projection == name && w.Aggregate == r.Aggregate {
					rep.Before[name] = w.Current
				}
			}
			if rep.After[name], err = c.version(ctx, proc, name, o.Generation, r.Aggregate); err != nil {
				return err
			}
			if rep.Before[name] < 0 { // it was not waiting in this projection
				rep.Before[name] = rep.After[name]
			}
		}
		reports = append(reports, rep)
	}
	if o.out.JSON {
		if err := clikit.WriteJSON(c.a.stdout, reports); err != nil {
			return err
		}
	} else if err := c.print(proc.Projections(), reports); err != nil {
		return err
	}
	if o.DryRun {
		return nil
	}
	if missing > 0 {
		return fmt.Errorf("%w: %d aggregates wait for versions missing at the source: see 'parked list', then 'parked declare-gap'", ErrIncomplete, missing)
	}
	return nil
}

// print prints the reports as a table.
func (c *parkedRepairCmd) print(projections []string, reports []RepairReport) error {
	if len(reports) == 0 {
		_, err := fmt.Fprintln(c.a.stdout, "no aggregate is waiting")
		return err
	}
	t := clikit.NewTable(c.a.stdout, "AGGREGATE", "LOOKED FOR", "FOUND", "OUTCOMES", "MISSING AT SOURCE", "APPLIED")
	for _, r := range reports {
		missing := "-"
		if len(r.Missing) > 0 {
			missing = fmt.Sprint(r.Missing)
			if r.Reason != "" {
				missing += " (" + r.Reason + ")"
			}
		}
		var applied []string
		for _, name := range projections {
			if b, a := r.Before[name], r.After[name]; a != b {
				applied = append(applied, fmt.Sprintf("%s %d->%d", name, b, a))
			}
		}
		if len(applied) == 0 {
			applied = []string{"nothing"}
			if r.DryRun {
				applied = []string{"nothing (dry run)"}
			}
		}
		t.Row(r.Aggregate, fmt.Sprintf("%d-%d", r.From, r.To), r.Found, outcomesCell(r.Outcomes), missing, strings.Join(applied, ", "))
	}
	return t.Flush()
}

// version returns an aggregate's applied version in generation gen of a
// projection (0: the live one).
func (c *parkedRepairCmd) version(ctx context.Context, proc *projection.Processor, name string, gen int, agg string) (int64, error) {
	if gen == 0 {
		return proc.Version(ctx, name, agg)
	}
	st, err := proc.Aggregates(ctx, projection.ListOptions{Projection: name, Generation: gen, Aggregate: agg, Limit: 1})
	if err != nil || len(st) == 0 {
		return 0, err
	}
	return st[0].Version, nil
}

// outcomesCell renders what became of the versions found: "1 applied, 1
// rejected (see 'rejected list')".
func outcomesCell(outcomes map[string]int) string {
	var parts []string
	for _, o := range projection.Outcomes {
		if n := outcomes[o.String()]; n > 0 {
			part := fmt.Sprintf("%d %s", n, o)
			switch o {
			case projection.Rejected:
				part += " (see 'rejected list')"
			case projection.Conflict:
				part += " (see 'conflicts list')"
			case projection.Quarantined:
				part += " (see 'quarantine list')"
			}
			parts = append(parts, part)
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
