package cli

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"os/user"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
)

// This file holds what the operator commands share: their flags, opening the
// processor (and the effects client), listing rows and acting on one
// aggregate. status.go, parked.go, quarantine.go, conflicts.go and
// rejected.go hold the commands.

// opOptions are the flags every operator command shares.
type opOptions struct {
	log clikit.LogOptions
	db  clikit.DBOptions
	out clikit.OutputOptions
}

func bindOp(fs *pflag.FlagSet, o *opOptions) {
	clikit.BindLog(fs, &o.log, "warn")
	clikit.BindDB(fs, &o.db)
	clikit.BindOutput(fs, &o.out)
}

func (o *opOptions) validate() error {
	if err := o.log.Validate(); err != nil {
		return err
	}
	return o.db.Validate()
}

// open connects and returns a processor of the binary's projections; close
// releases the pool.
func (a *App) open(ctx context.Context, o *opOptions) (proc *projection.Processor, close func(), err error) {
	logger := o.log.Logger(a.stderr)
	pool, err := clikit.Connect(ctx, &o.db, 4, logger)
	if err != nil {
		return nil, nil, err
	}
	if err := a.prepareSchema(ctx, pool, &o.db, false, false, logger); err != nil {
		pool.Close()
		return nil, nil, err
	}
	proc, err = a.processor(pool, &o.db, logger)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return proc, pool.Close, nil
}

// openEffects connects, checks the schemas and returns the effects client
// (effectsReader: handlers are not needed) and a processor (for the
// operator log); close releases the pool.
func (a *App) openEffects(ctx context.Context, o *opOptions) (*effects.Client, *projection.Processor, func(), error) {
	logger := o.log.Logger(a.stderr)
	pool, err := clikit.Connect(ctx, &o.db, 4, logger)
	if err != nil {
		return nil, nil, nil, err
	}
	fail := func(err error) (*effects.Client, *projection.Processor, func(), error) {
		pool.Close()
		return nil, nil, nil, err
	}
	if err := a.prepareSchema(ctx, pool, &o.db, false, false, logger); err != nil {
		return fail(err)
	}
	fx, err := a.effectsReader(pool, &o.db, logger)
	if err != nil {
		return fail(err)
	}
	pc := a.cfg.Processor
	pc.Schema, pc.Logger = o.db.Schema, logger
	proc, err := projection.New(pool, &pc, a.cfg.Projections...)
	if err != nil {
		return fail(fmt.Errorf("processor: %w", err))
	}
	return fx, proc, pool.Close, nil
}

// listOptions are the flags of the list commands: the operator flags and
// the filters.
type listOptions struct {
	opOptions
	a              *App
	Projection     string
	Generation     int
	AllGenerations bool
	Aggregate      string
	AfterID        int64
	Limit          int
}

// bind defines the operator flags, the listing's filters (any of
// "projection", "generation", "aggregate", "after-id") and --limit, at most
// limit of unit by default.
func (o *listOptions) bind(fs *pflag.FlagSet, limit int, unit string, filters ...string) {
	bindOp(fs, &o.opOptions)
	for _, f := range filters {
		switch f {
		case "projection":
			fs.StringVar(&o.Projection, f, "", "only this `projection`")
		case "generation":
			fs.IntVar(&o.Generation, f, 0, "list this `generation` of the projections (see 'rebuild status'); default: the live one")
			fs.BoolVar(&o.AllGenerations, "all-generations", false, "list every generation of the projections, not only the live one")
		case "aggregate":
			fs.StringVar(&o.Aggregate, f, "", "only this `aggregate`")
		case "after-id":
			fs.Int64Var(&o.AfterID, f, 0, "only entries with a larger `id` (paging: the last ID shown)")
		default:
			panic("cli: unknown list filter " + f)
		}
	}
	fs.IntVar(&o.Limit, "limit", limit, "at most this many `"+unit+"`")
}

// check validates the filters: --projection, when set, --generation and
// --limit.
func (o *listOptions) check() error {
	if o.Projection != "" {
		if _, err := o.a.pickProjection(o.Projection); err != nil {
			return err
		}
	}
	if o.Generation < 0 {
		return clikit.Usagef("--generation must be at least 1")
	}
	if o.Generation > 0 && o.AllGenerations {
		return clikit.Usagef("--generation and --all-generations exclude each other")
	}
	if o.Limit < 1 {
		return clikit.Usagef("--limit must be at least 1")
	}
	return nil
}

// listOpts returns the processor's listing options of the flags.
func (o *listOptions) listOpts() projection.ListOptions {
	return projection.ListOptions{Projection: o.Projection, Generation: o.Generation, AllGenerations: o.AllGenerations,
		Aggregate: o.Aggregate, AfterID: o.AfterID, Limit: o.Limit}
}

// validate is the validate step of the list commands without positional
// arguments.
func (o *listOptions) validate(args []string) error {
	if err := clikit.NoArgs(args); err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	return o.opOptions.validate()
}

// listing says how a list command prints its rows: with --json, the array
// of the rows' view types (package projection), as the HTTP API sends them;
// else a table.
type listing[T any] struct {
	headers []string
	cells   func(T) []any // a row's table cells
	empty   string        // if set, printed instead of an empty table
}

// runList opens the processor, reads the rows with read and prints them.
func runList[T any](ctx context.Context, a *App, o *opOptions, read func(context.Context, *projection.Processor) ([]T, error), l listing[T]) error {
	proc, closeFn, err := a.open(ctx, o)
	if err != nil {
		return err
	}
	defer closeFn()
	rows, err := read(ctx, proc)
	if err != nil {
		return err
	}
	if o.out.JSON {
		if rows == nil {
			rows = []T{}
		}
		return clikit.WriteJSON(a.stdout, rows)
	}
	if len(rows) == 0 && l.empty != "" {
		fmt.Fprintln(a.stdout, l.empty)
		return nil
	}
	t := clikit.NewTable(a.stdout, l.headers...)
	for _, r := range rows {
		t.Row(l.cells(r)...)
	}
	return t.Flush()
}

// actOptions are the flags every command that changes something shares:
// --dry-run and --by (who acts, for the operator log).
type actOptions struct {
	DryRun bool
	By     string
}

// bindAct defines --dry-run and --by; what says what the dry run shows.
func bindAct(fs *pflag.FlagSet, o *actOptions, what string) {
	fs.BoolVar(&o.DryRun, "dry-run", false, "change nothing: "+what)
	fs.StringVar(&o.By, "by", "", "who acts, for the operator log (default: $USER@host)")
	clikit.SetEnv(fs, "by", clikit.EnvOperator)
}

// options returns the processor's action options of the flags, with the
// actor defaulted.
func (o *actOptions) options(a *App, generation int, reason string) *projection.ActionOptions {
	return &projection.ActionOptions{Generation: generation, DryRun: o.DryRun, By: cmp.Or(o.By, a.actor()), Reason: reason}
}

// actor names who runs the command: $USER@host.
func (a *App) actor() string {
	u := cmp.Or(a.getenv("USER"), a.getenv("LOGNAME"))
	if u == "" {
		if cu, err := user.Current(); err == nil {
			u = cu.Username
		}
	}
	host, _ := os.Hostname()
	return cmp.Or(u, "unknown") + "@" + cmp.Or(host, "localhost")
}

// actionOptions are the flags of the commands that act on one aggregate of
// one generation of one projection.
type actionOptions struct {
	opOptions
	actOptions
	a          *App
	Projection string
	Generation int
	Reason     string
	Aggregate  string
}

// bindAction defines the flags of an action on an aggregate.
func (o *actionOptions) bind(fs *pflag.FlagSet, what string) {
	bindOp(fs, &o.opOptions)
	bindAct(fs, &o.actOptions, what)
	fs.StringVar(&o.Projection, "projection", "", "the `projection` (default: the only one)")
	fs.IntVar(&o.Generation, "generation", 0, "the projection's `generation` (see 'rebuild status'); default: the live one")
}

// check takes the aggregate argument and picks the projection.
func (o *actionOptions) check(args []string) error {
	agg, err := clikit.OneArg(args, "aggregate")
	if err != nil {
		return err
	}
	o.Aggregate = agg
	if o.Generation < 0 {
		return clikit.Usagef("--generation must be at least 1")
	}
	o.Projection, err = o.a.pickProjection(o.Projection)
	return err
}

// runAction opens the processor, runs act on o's aggregate and prints its
// report.
func (a *App) runAction(ctx context.Context, o *actionOptions, act func(ctx context.Context, proc *projection.Processor, opts *projection.ActionOptions) (projection.ActionReport, error)) error {
	return a.report(ctx, &o.opOptions, func(proc *projection.Processor) (projection.ActionReport, error) {
		return act(ctx, proc, o.options(a, o.Generation, o.Reason))
	})
}

// report opens the processor, runs act on it and prints its report.
func (a *App) report(ctx context.Context, o *opOptions, act func(proc *projection.Processor) (projection.ActionReport, error)) error {
	proc, closeFn, err := a.open(ctx, o)
	if err != nil {
		return err
	}
	defer closeFn()
	rep, err := act(proc)
	if err != nil {
		return err
	}
	return a.printReport(o, rep)
}

// printReport prints what an action did, or would do: the report itself
// with --json.
func (a *App) printReport(o *opOptions, r projection.ActionReport) error {
	if o.out.JSON {
		return clikit.WriteJSON(a.stdout, r)
	}
	fmt.Fprintln(a.stdout, reportLine(r))
	return nil
}

// reportLine renders an action's report in one line.
func reportLine(r projection.ActionReport) string {
	var b strings.Builder
	if r.DryRun {
		b.WriteString("dry run, nothing changed: ")
	}
	b.WriteString(r.Action + ":")
	if r.Projection != "" {
		fmt.Fprintf(&b, " %s", r.Projection)
		if r.Generation > 0 {
			fmt.Fprintf(&b, " generation %d", r.Generation)
		}
	}
	if r.Aggregate != "" {
		fmt.Fprintf(&b, " %s", r.Aggregate)
	}
	if r.ID > 0 {
		fmt.Fprintf(&b, " #%d", r.ID)
	}
	b.WriteString(": ")
	if r.DryRun {
		b.WriteString("would be: ")
	}
	b.WriteString(r.Message)
	if r.Aggregate != "" && r.ID == 0 {
		fmt.Fprintf(&b, "; version %d -> %d", r.Before, r.After)
	}
	if len(r.Resolved) > 0 {
		fmt.Fprintf(&b, "; rejected deliveries resolved: %v", r.Resolved)
	}
	if len(r.Deleted) > 0 {
		keys := slices.Sorted(maps.Keys(r.Deleted))
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %d", k, r.Deleted[k])
		}
		fmt.Fprintf(&b, "; rows: %s", strings.Join(parts, ", "))
	}
	return b.String()
}

// needReason requires the --reason of an action the operator log records.
func needReason(reason string) error {
	if reason == "" {
		return clikit.Usagef("--reason is required: it is recorded in the operator log")
	}
	return nil
}
