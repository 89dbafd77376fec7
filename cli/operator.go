package cli

import (
	"context"
	"fmt"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
)

// This file holds what the operator commands share: their flags, opening the
// processor, listing rows and acting on one aggregate. status.go, parked.go,
// quarantine.go, conflicts.go and rejected.go hold the commands.

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

// listOptions are the flags of the list commands: the operator flags and
// the filters.
type listOptions struct {
	opOptions
	a          *App
	Projection string
	Aggregate  string
	AfterID    int64
	Limit      int
}

// bind defines the operator flags, the listing's filters (any of
// "projection", "aggregate", "after-id") and --limit, at most limit of unit
// by default.
func (o *listOptions) bind(fs *pflag.FlagSet, limit int, unit string, filters ...string) {
	bindOp(fs, &o.opOptions)
	for _, f := range filters {
		switch f {
		case "projection":
			fs.StringVar(&o.Projection, f, "", "only this `projection`")
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

// check validates the filters: --projection, when set, and --limit.
func (o *listOptions) check() error {
	if o.Projection != "" {
		if _, err := o.a.pickProjection(o.Projection); err != nil {
			return err
		}
	}
	if o.Limit < 1 {
		return clikit.Usagef("--limit must be at least 1")
	}
	return nil
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

// actionOptions are the flags of the commands that act on one aggregate of
// one projection.
type actionOptions struct {
	opOptions
	a          *App
	Projection string
	Reason     string
	Aggregate  string
}

// check takes the aggregate argument and picks the projection.
func (o *actionOptions) check(args []string) error {
	agg, err := clikit.OneArg(args, "aggregate")
	if err != nil {
		return err
	}
	o.Aggregate = agg
	o.Projection, err = o.a.pickProjection(o.Projection)
	return err
}

// runAction opens the processor, runs act on o's aggregate and prints what
// it did with the aggregate's applied version before and after.
func (a *App) runAction(ctx context.Context, o *actionOptions, action string, act func(ctx context.Context, proc *projection.Processor, before int64) (message string, err error)) error {
	proc, closeFn, err := a.open(ctx, &o.opOptions)
	if err != nil {
		return err
	}
	defer closeFn()
	r := ActionReport{Action: action, Projection: o.Projection, Aggregate: o.Aggregate}
	if r.Before, err = proc.Version(ctx, o.Projection, o.Aggregate); err != nil {
		return err
	}
	if r.Message, err = act(ctx, proc, r.Before); err != nil {
		return err
	}
	if r.After, err = proc.Version(ctx, o.Projection, o.Aggregate); err != nil {
		return err
	}
	if o.out.JSON {
		return clikit.WriteJSON(a.stdout, r)
	}
	fmt.Fprintf(a.stdout, "%s: %s %s: %s; version %d -> %d\n", r.Action, r.Projection, r.Aggregate, r.Message, r.Before, r.After)
	return nil
}

// ActionReport is what an operator action (declare-gap, quarantine retry
// and skip) prints with --json.
type ActionReport struct {
	Action     string `json:"action"`
	Projection string `json:"projection"`
	Aggregate  string `json:"aggregate"`
	// Before and After are the aggregate's applied version before and
	// after the action.
	Before  int64  `json:"before"`
	After   int64  `json:"after"`
	Message string `json:"message"`
}

// needReason requires the --reason of an action the operator log records.
func needReason(reason string) error {
	if reason == "" {
		return clikit.Usagef("--reason is required: it is recorded in the operator log")
	}
	return nil
}
