package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"strconv"
	"time"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/httpapi"
	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
)

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

// --- status ---

// statusOptions configures status.
type statusOptions struct{ opOptions }

func (o *statusOptions) validate(args []string) error {
	if err := clikit.NoArgs(args); err != nil {
		return err
	}
	return o.opOptions.validate()
}

// statusCmd prints the state of every projection.
type statusCmd struct{ a *App }

func (c *statusCmd) command() *cobra.Command {
	return leaf("status", "show every projection's gate state, rejected events and checkpoints",
		`Shows, per projection: the aggregates seen, the events applied, the events
parked and the age of the oldest, the quarantined events and the conflicts
recorded; then the rejected deliveries and the sources' checkpoints; then, in
a binary with effect handlers, the open effect intents per kind (pending,
running, retrying, failed, uncertain, the oldest waiting). Read-only.`,
		func(fs *pflag.FlagSet) *statusOptions {
			o := &statusOptions{}
			bindOp(fs, &o.opOptions)
			return o
		}, c.Run)
}

// Run prints the status.
func (c *statusCmd) Run(ctx context.Context, o *statusOptions) error {
	var proc *projection.Processor
	var fx *effects.Client
	var closeFn func()
	var err error
	if len(c.a.cfg.Effects) > 0 {
		fx, proc, closeFn, err = c.a.openEffects(ctx, &o.opOptions)
	} else {
		proc, closeFn, err = c.a.open(ctx, &o.opOptions)
	}
	if err != nil {
		return err
	}
	defer closeFn()
	var stats httpapi.EffectsStats
	if fx != nil {
		stats = fx
	}
	st, err := httpapi.Status(ctx, proc, stats)
	if err != nil {
		return err
	}
	if o.out.JSON {
		return clikit.WriteJSON(c.a.stdout, st)
	}
	t := clikit.NewTable(c.a.stdout, "PROJECTION", "AGGREGATES", "EVENTS", "PARKED", "PARKED AGGS", "OLDEST PARKED", "QUARANTINED", "CONFLICTS")
	for _, p := range st.Projections {
		t.Row(p.Name, p.Aggregates, p.Events, p.Parked, p.ParkedAggregates, clikit.AgeOf(p.OldestParked), p.Quarantined, p.Conflicts)
	}
	if err := t.Flush(); err != nil {
		return err
	}
	if len(st.Generations) > len(st.Projections) {
		// Some projection has more than its live generation: a rebuild.
		fmt.Fprintln(c.a.stdout)
		t := clikit.NewTable(c.a.stdout, "PROJECTION", "GENERATION", "CODE VERSION", "STATE", "PHASE", "EVENTS", "LAG")
		for _, g := range st.Generations {
			lag := "-"
			if g.Lag > 0 {
				lag = clikit.Age(g.Lag)
			}
			t.Row(g.Projection, g.Generation, g.CodeVersion, g.State, g.Phase, g.Events, lag)
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(c.a.stdout, "\nrejected deliveries: %d (%d not replayed)\n", st.Rejected.Total, st.Rejected.Pending)
	if len(st.Checkpoints) > 0 {
		fmt.Fprintln(c.a.stdout)
		t := clikit.NewTable(c.a.stdout, "CHECKPOINT", "POSITION", "UPDATED")
		for _, cp := range st.Checkpoints {
			t.Row(cp.Name, cp.Position.String(), clikit.Age(cp.Age)+" ago")
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	if fx != nil {
		fmt.Fprintln(c.a.stdout)
		t := clikit.NewTable(c.a.stdout, "EFFECT KIND", "PENDING", "RUNNING", "RETRYING", "FAILED", "UNCERTAIN", "OLDEST PENDING")
		for _, k := range st.Effects {
			t.Row(k.Kind, k.Pending, k.Running, k.Retrying, k.Failed, k.Uncertain, clikit.AgeOf(k.OldestPending))
		}
		return t.Flush()
	}
	return nil
}

// --- parked ---

// parkedListOptions configures parked list.
type parkedListOptions struct {
	listOptions
	OlderThan time.Duration
}

func (o *parkedListOptions) validate(args []string) error {
	if err := clikit.NoArgs(args); err != nil {
		return err
	}
	if err := o.check(); err != nil {
		return err
	}
	if o.OlderThan < 0 {
		return clikit.Usagef("--older-than must not be negative")
	}
	return o.opOptions.validate()
}

// parkedListCmd lists the aggregates that have parked events.
type parkedListCmd struct{ a *App }

func (c *parkedListCmd) command() *cobra.Command {
	return leaf("list", "list the aggregates waiting for missing versions, longest waiting first",
		`Lists the aggregates that have parked events — future versions stored until
the versions before them arrive — with the versions they wait for, how many
events are parked and how long the oldest has waited. Read-only.

An aggregate that waits long usually lacks an event the source has not
delivered: try 'parked repair', then, if the versions really do not exist,
'parked declare-gap'.`,
		func(fs *pflag.FlagSet) *parkedListOptions {
			o := &parkedListOptions{listOptions: listOptions{a: c.a}}
			o.bind(fs, 100, "rows", "projection", "aggregate")
			fs.DurationVar(&o.OlderThan, "older-than", 0, "only aggregates whose oldest parked event waited at least this `duration`")
			return o
		}, c.Run)
}

// Run lists waiting aggregates.
func (c *parkedListCmd) Run(ctx context.Context, o *parkedListOptions) error {
	return runList(ctx, c.a, &o.opOptions, func(ctx context.Context, proc *projection.Processor) ([]projection.WaitingEntry, error) {
		return proc.Waiting(ctx, projection.ListOptions{Projection: o.Projection, Aggregate: o.Aggregate, OlderThan: o.OlderThan, Limit: o.Limit})
	}, listing[projection.WaitingEntry]{
		headers: []string{"PROJECTION", "AGGREGATE", "APPLIED", "WAITING FOR", "PARKED", "VERSIONS", "OLDEST"},
		cells: func(w projection.WaitingEntry) []any {
			from, to := w.MissingFrom, w.MissingTo
			missing := strconv.FormatInt(from, 10)
			if to > from {
				missing += "-" + strconv.FormatInt(to, 10)
			}
			return []any{w.Projection, w.Aggregate, w.Current, missing, w.Parked, fmt.Sprintf("%d-%d", w.MinVersion, w.MaxVersion), clikit.AgeOf(w.Oldest)}
		},
	})
}

// parkedShowOptions configures parked show.
type parkedShowOptions struct{ listOptions }

func (o *parkedShowOptions) validate(args []string) error {
	agg, err := clikit.OneArg(args, "aggregate")
	if err != nil {
		return err
	}
	o.Aggregate = agg
	if err := o.check(); err != nil {
		return err
	}
	return o.opOptions.validate()
}

// parkedShowCmd shows one aggregate's parked events.
type parkedShowCmd struct{ a *App }

func (c *parkedShowCmd) command() *cobra.Command {
	return leaf("show <aggregate>", "show the parked events of one aggregate",
		`Shows the parked events of one aggregate, in every projection (or in
--projection), with the applied version they wait behind. Read-only.`,
		func(fs *pflag.FlagSet) *parkedShowOptions {
			o := &parkedShowOptions{listOptions{a: c.a}}
			o.bind(fs, 1000, "events", "projection")
			return o
		}, c.Run)
}

// Run shows the parked events.
func (c *parkedShowCmd) Run(ctx context.Context, o *parkedShowOptions) error {
	return runList(ctx, c.a, &o.opOptions, func(ctx context.Context, proc *projection.Processor) ([]projection.ParkedEntry, error) {
		return proc.Parked(ctx, projection.ListOptions{Projection: o.Projection, Aggregate: o.Aggregate, Limit: o.Limit})
	}, listing[projection.ParkedEntry]{
		headers: []string{"PROJECTION", "APPLIED", "VERSION", "EVENT ID", "TYPE", "PARKED", "DATA"},
		cells: func(e projection.ParkedEntry) []any {
			return []any{e.Projection, e.Current, e.Version, e.EventID, e.Type, clikit.AgeOf(e.ParkedAt) + " ago", e.Data}
		},
		empty: fmt.Sprintf("aggregate %s has no parked events", o.Aggregate),
	})
}

// declareGapOptions configures parked declare-gap.
type declareGapOptions struct {
	actionOptions
	To int64
}

func (o *declareGapOptions) validate(args []string) error {
	if err := o.check(args); err != nil {
		return err
	}
	if o.To < 1 {
		return clikit.Usagef("--to is required: the last missing version")
	}
	if err := needReason(o.Reason); err != nil {
		return err
	}
	return o.opOptions.validate()
}

// declareGapCmd declares missing versions.
type declareGapCmd struct{ a *App }

func (c *declareGapCmd) command() *cobra.Command {
	return leaf("declare-gap <aggregate>", "declare versions that will never arrive, and drain what waits behind them",
		`Records that versions applied+1 … --to of an aggregate do not exist (deleted
or truncated at the source), advances the aggregate past them without
applying anything, and applies the parked events that were waiting behind
the gap.

Changes: the aggregate's version in --projection, the read model (the
drained events are applied) and the operator log (with --reason). It cannot
be undone except by a rebuild. --to must be below the first parked version;
an aggregate in quarantine is refused (use 'quarantine').`,
		func(fs *pflag.FlagSet) *declareGapOptions {
			o := &declareGapOptions{actionOptions: actionOptions{a: c.a}}
			bindOp(fs, &o.opOptions)
			fs.StringVar(&o.Projection, "projection", "", "the `projection` (default: the only one)")
			fs.Int64Var(&o.To, "to", 0, "the last missing `version` (required)")
			fs.StringVar(&o.Reason, "reason", "", "why the versions are missing, for the operator log (required)")
			return o
		}, c.Run)
}

// Run declares the gap.
func (c *declareGapCmd) Run(ctx context.Context, o *declareGapOptions) error {
	return c.a.runAction(ctx, &o.actionOptions, "declare-gap", func(ctx context.Context, proc *projection.Processor, before int64) (string, error) {
		if err := proc.DeclareGap(ctx, o.Projection, o.Aggregate, o.To, o.Reason); err != nil {
			return "", err
		}
		return fmt.Sprintf("versions %d-%d declared missing", before+1, o.To), nil
	})
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

// --- quarantine ---

// quarantineListOptions configures quarantine list.
type quarantineListOptions struct{ listOptions }

// quarantineListCmd lists quarantined events.
type quarantineListCmd struct{ a *App }

func (c *quarantineListCmd) command() *cobra.Command {
	return leaf("list", "list quarantined events, the longest quarantined first",
		`Lists the events whose handler failed for good, one per aggregate at most,
with the last error and the attempts. Each blocks its aggregate: later
versions park behind it until an operator retries or skips it. Read-only.`,
		func(fs *pflag.FlagSet) *quarantineListOptions {
			o := &quarantineListOptions{listOptions{a: c.a}}
			o.bind(fs, 100, "rows", "projection", "aggregate")
			return o
		}, c.Run)
}

// Run lists the quarantine.
func (c *quarantineListCmd) Run(ctx context.Context, o *quarantineListOptions) error {
	return runList(ctx, c.a, &o.opOptions, func(ctx context.Context, proc *projection.Processor) ([]projection.QuarantineEntry, error) {
		return proc.Quarantined(ctx, projection.ListOptions{Projection: o.Projection, Aggregate: o.Aggregate, Limit: o.Limit})
	}, listing[projection.QuarantineEntry]{
		headers: []string{"PROJECTION", "AGGREGATE", "VERSION", "TYPE", "ATTEMPTS", "QUARANTINED", "ERROR"},
		cells: func(q projection.QuarantineEntry) []any {
			return []any{q.Projection, q.Aggregate, q.Version, q.Type, q.Attempts, clikit.AgeOf(q.QuarantinedAt) + " ago", q.Error}
		},
	})
}

// quarantineActionOptions configures quarantine retry and skip.
type quarantineActionOptions struct {
	actionOptions
	skip bool
}

func (o *quarantineActionOptions) validate(args []string) error {
	if err := o.check(args); err != nil {
		return err
	}
	if o.skip {
		if err := needReason(o.Reason); err != nil {
			return err
		}
	}
	return o.opOptions.validate()
}

// quarantineActionCmd retries or skips a quarantined event.
type quarantineActionCmd struct {
	a    *App
	skip bool
}

func (c *quarantineActionCmd) command() *cobra.Command {
	bind := func(fs *pflag.FlagSet) *quarantineActionOptions {
		o := &quarantineActionOptions{actionOptions: actionOptions{a: c.a}, skip: c.skip}
		bindOp(fs, &o.opOptions)
		fs.StringVar(&o.Projection, "projection", "", "the `projection` (default: the only one)")
		if c.skip {
			fs.StringVar(&o.Reason, "reason", "", "why the event is skipped, for the operator log (required)")
		}
		return o
	}
	if c.skip {
		return leaf("skip <aggregate>", "advance past a quarantined event without applying it",
			`Advances the aggregate past its quarantined event WITHOUT applying it,
records the decision and --reason in the operator log, and applies the
parked events waiting behind it.

Changes: the aggregate's version, the read model (the drained events) and the
operator log; the skipped event's effect is lost for good (a rebuild replays
it again). Prefer 'quarantine retry' once the handler is fixed.`, bind, c.Run)
	}
	return leaf("retry <aggregate>", "apply a quarantined event again, once its fault is fixed",
		`Applies the aggregate's quarantined event again — after the handler or the
data behind it was fixed — then the parked events waiting behind it. If it
fails again it stays quarantined (its attempts and error are updated) and
the command exits with status 1.

Changes: the read model, the aggregate's version and the operator log.`, bind, c.Run)
}

// Run retries or skips.
func (c *quarantineActionCmd) Run(ctx context.Context, o *quarantineActionOptions) error {
	action, msg := "retry", "quarantined event applied"
	if o.skip {
		action, msg = "skip", "quarantined event skipped"
	}
	return c.a.runAction(ctx, &o.actionOptions, action, func(ctx context.Context, proc *projection.Processor, _ int64) (string, error) {
		var err error
		if o.skip {
			err = proc.SkipQuarantined(ctx, o.Projection, o.Aggregate, o.Reason)
		} else {
			err = proc.RetryQuarantined(ctx, o.Projection, o.Aggregate)
		}
		var herr *projection.HandlerError
		if errors.As(err, &herr) {
			// The processor's error names the projection, action and
			// aggregate; say only what it cannot know.
			return "", fmt.Errorf("the event still fails and stays quarantined: %w", err)
		}
		return msg, err
	})
}

// --- conflicts ---

// conflictsListOptions configures conflicts list.
type conflictsListOptions struct {
	listOptions
	Open bool
}

// conflictsListCmd lists conflicts.
type conflictsListCmd struct{ a *App }

func (c *conflictsListCmd) command() *cobra.Command {
	return leaf("list", "list deliveries that reuse a version with a different id or payload",
		`Lists recorded conflicts: deliveries of an (aggregate, version) whose event id
or payload differ from the event that holds that version (applied, parked or
quarantined). They were never applied. A conflict means the source rewrote
history or two producers wrote the same version: fix the source; if the
applied event was the wrong one, rebuild the projection; then acknowledge
it with 'conflicts ack'. --open leaves acknowledged ones out. Read-only;
page with --after-id.`,
		func(fs *pflag.FlagSet) *conflictsListOptions {
			o := &conflictsListOptions{listOptions: listOptions{a: c.a}}
			o.bind(fs, 100, "rows", "projection", "aggregate", "after-id")
			fs.BoolVar(&o.Open, "open", false, "only conflicts no operator acknowledged")
			return o
		}, c.Run)
}

// Run lists conflicts.
func (c *conflictsListCmd) Run(ctx context.Context, o *conflictsListOptions) error {
	return runList(ctx, c.a, &o.opOptions, func(ctx context.Context, proc *projection.Processor) ([]projection.ConflictEntry, error) {
		return proc.Conflicts(ctx, projection.ListOptions{Projection: o.Projection, Aggregate: o.Aggregate, AfterID: o.AfterID, Open: o.Open, Limit: o.Limit})
	}, listing[projection.ConflictEntry]{
		headers: []string{"ID", "PROJECTION", "AGGREGATE", "VERSION", "HELD BY", "EXISTING ID", "INCOMING ID", "TYPE", "COUNT", "LAST SEEN", "ACKNOWLEDGED"},
		cells: func(x projection.ConflictEntry) []any {
			acked := "no"
			if !x.AcknowledgedAt.IsZero() {
				acked = clikit.AgeOf(x.AcknowledgedAt) + " ago"
			}
			return []any{x.ID, x.Projection, x.Aggregate, x.Version, x.ExistingState, x.ExistingEventID, x.IncomingEventID, x.Type, x.Count, clikit.AgeOf(x.LastSeen) + " ago", acked}
		},
	})
}

// --- rejected ---

// rejectedListOptions configures rejected list (no --projection: rejected
// deliveries belong to none).
type rejectedListOptions struct{ listOptions }

// rejectedListCmd lists rejected deliveries.
type rejectedListCmd struct{ a *App }

func (c *rejectedListCmd) command() *cobra.Command {
	return leaf("list", "list deliveries that failed validation, with the reason",
		`Lists deliveries whose envelope was invalid (no aggregate id, version below
1, no type, data that is not JSON, payload too large, unknown type), with the
reason code and error, how often each was delivered and whether an operator
replayed it. They were acknowledged to the source and applied nowhere.
Read-only; page with --after-id.`,
		func(fs *pflag.FlagSet) *rejectedListOptions {
			o := &rejectedListOptions{listOptions{a: c.a}}
			o.bind(fs, 100, "rows", "aggregate", "after-id")
			return o
		}, c.Run)
}

// Run lists rejected deliveries.
func (c *rejectedListCmd) Run(ctx context.Context, o *rejectedListOptions) error {
	return runList(ctx, c.a, &o.opOptions, func(ctx context.Context, proc *projection.Processor) ([]projection.RejectedEntry, error) {
		return proc.Rejected(ctx, projection.ListOptions{Aggregate: o.Aggregate, AfterID: o.AfterID, Limit: o.Limit})
	}, listing[projection.RejectedEntry]{
		headers: []string{"ID", "AGGREGATE", "VERSION", "TYPE", "REASON", "COUNT", "LAST SEEN", "REPLAYED", "ERROR"},
		cells: func(r projection.RejectedEntry) []any {
			replayed := "no"
			if !r.ReplayedAt.IsZero() {
				replayed = clikit.AgeOf(r.ReplayedAt) + " ago"
			}
			return []any{r.ID, r.Aggregate, r.Version, r.Type, r.Reason, r.Count, clikit.AgeOf(r.LastSeen) + " ago", replayed, r.Error}
		},
	})
}

// rejectedReplayOptions configures rejected replay.
type rejectedReplayOptions struct {
	opOptions
	ID int64
}

func (o *rejectedReplayOptions) validate(args []string) error {
	id, err := parseID(args, "rejected event id", "the ID column of 'rejected list'")
	if err != nil {
		return err
	}
	o.ID = id
	return o.opOptions.validate()
}

// needReason requires the --reason of an action the operator log records.
func needReason(reason string) error {
	if reason == "" {
		return clikit.Usagef("--reason is required: it is recorded in the operator log")
	}
	return nil
}

// parseID takes the single positional argument: a positive id.
func parseID(args []string, what, want string) (int64, error) {
	s, err := clikit.OneArg(args, what)
	if err != nil {
		return 0, err
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, clikit.Usagef("invalid id %q: want %s", s, want)
	}
	return id, nil
}

// rejectedReplayCmd replays a rejected delivery.
type rejectedReplayCmd struct{ a *App }

func (c *rejectedReplayCmd) command() *cobra.Command {
	return leaf("replay <id>", "feed a rejected delivery through the gate again, once the cause is fixed",
		`Feeds the rejected delivery with the given id (see 'rejected list') through
the processor again — after what made it invalid was fixed (a raised payload
limit, a newly accepted type) — and marks it replayed. If it is still
invalid it stays rejected and the command exits with status 1.

Changes: like any delivery, it may apply, park or be discarded as a
duplicate; the entry's replayed_at and the operator log are updated.`,
		func(fs *pflag.FlagSet) *rejectedReplayOptions {
			o := &rejectedReplayOptions{}
			bindOp(fs, &o.opOptions)
			return o
		}, c.Run)
}

// Run replays the rejected delivery.
func (c *rejectedReplayCmd) Run(ctx context.Context, o *rejectedReplayOptions) error {
	proc, closeFn, err := c.a.open(ctx, &o.opOptions)
	if err != nil {
		return err
	}
	defer closeFn()
	res, err := proc.ReplayRejected(ctx, o.ID)
	if err != nil {
		return fmt.Errorf("rejected replay %d: %w", o.ID, err)
	}
	outcomes := map[string]string{}
	for i, name := range proc.Projections() {
		outcomes[name] = res.Projections[i].String()
	}
	if o.out.JSON {
		return clikit.WriteJSON(c.a.stdout, map[string]any{"id": o.ID, "outcome": res.Outcome.String(), "projections": outcomes})
	}
	fmt.Fprintf(c.a.stdout, "rejected event %d replayed: %s\n", o.ID, res.Outcome)
	return nil
}
