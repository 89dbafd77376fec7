package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/migrations"
	"github.com/inorder/inorder/projection"
)

// DefaultEffectsWorkers is how many effects run performs at once when
// --effects-workers is not given.
const DefaultEffectsWorkers = 10

// effectsClient returns the effects client of the binary's handlers
// (Config.Effects) on pool, in --schema and --river-schema, after handing it
// to the projections that implement effects.Binder (and keeping it as a.fx);
// nil when the binary has no handlers. tune, if not nil, is the command's
// --effects-* flags.
func (a *App) effectsClient(pool *pgxpool.Pool, db *clikit.DBOptions, logger *slog.Logger, tune *effectsFlags) (*effects.Client, error) {
	if len(a.cfg.Effects) == 0 {
		return nil, nil
	}
	cfg := a.cfg.EffectsConfig
	cfg.Schema, cfg.RiverSchema, cfg.Logger = db.Schema, db.River(), logger
	if cfg.TracerProvider == nil && a.traces != nil && a.traces.Enabled() {
		cfg.TracerProvider = a.traces.Provider // a span per effect, with the process's exporter
	}
	if tune != nil {
		tune.apply(&cfg)
	}
	fx, err := effects.New(pool, &cfg, a.cfg.Effects...)
	if err != nil {
		return nil, err
	}
	effects.Bind(fx, a.cfg.Projections...)
	a.fx = fx
	return fx, nil
}

// effectsReader returns a client to read and act on the intents with: the
// binary's (effectsClient), or, in a binary without handlers, one without
// any — listing, showing, retrying, cancelling and the reconciliation
// pass's recovery need only the tables, not the handlers. It is handed to
// no projection: one without handlers cannot record.
func (a *App) effectsReader(pool *pgxpool.Pool, db *clikit.DBOptions, logger *slog.Logger) (*effects.Client, error) {
	if len(a.cfg.Effects) > 0 {
		return a.effectsClient(pool, db, logger, nil)
	}
	cfg := a.cfg.EffectsConfig
	cfg.Schema, cfg.RiverSchema, cfg.Logger = db.Schema, db.River(), logger
	return effects.New(pool, &cfg)
}

// requireEffects is the error of 'effects work' in a binary without
// handlers.
func (a *App) requireEffects() error {
	if len(a.cfg.Effects) == 0 {
		return errors.New("this binary has no effect handlers (cli.Config.Effects): nothing to perform")
	}
	return nil
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

// effectsFlags are the flags of the commands that perform effects (run,
// effects work): how many at once, the call timeout and the recovery
// policy (effects.Recovery). Their defaults are the binary's
// (cli.Config.EffectsConfig), else the effects package's.
type effectsFlags struct {
	Workers           int
	CallTimeout       time.Duration
	Lease             time.Duration
	ReconcileInterval time.Duration
	RescueAfter       time.Duration
}

// bindEffects binds the --effects-* flags, with tmpl's defaults; workers
// is --effects-workers' usage.
func bindEffects(fs *pflag.FlagSet, o *effectsFlags, tmpl effects.Config, workers string) {
	fs.IntVar(&o.Workers, "effects-workers", DefaultEffectsWorkers, workers)
	fs.DurationVar(&o.CallTimeout, "effects-call-timeout", cmp.Or(tmpl.Timeout, effects.DefaultTimeout),
		"longest effect call (a webhook's POST, a Reconcile): a call still unanswered is cancelled, and retried with the same key")
	fs.DurationVar(&o.Lease, "effects-lease", tmpl.Lease,
		"how long an attempt holds its intent, and a River job may run without holding it, before its executor is presumed dead and the intent taken up again (0: twice --effects-call-timeout; must exceed it)")
	fs.DurationVar(&o.ReconcileInterval, "effects-reconcile-interval", cmp.Or(tmpl.ReconcileInterval, effects.DefaultReconcileInterval),
		"how often the reconciliation pass takes up the intents of dead executors (and asks about failed uncertain ones)")
	fs.DurationVar(&o.RescueAfter, "effects-rescue-after", tmpl.RescueAfter,
		"River's RescueStuckJobsAfter: when River's leader retries the jobs of dead clients, which only finishes River's own rows (0: 2 × --effects-call-timeout + 20s; at least 2 × --effects-call-timeout + 5s)")
}

// validate checks the flags; minWorkers is the least --effects-workers.
func (o *effectsFlags) validate(minWorkers int) error {
	switch {
	case o.Workers < minWorkers && minWorkers == 0:
		return clikit.Usagef("--effects-workers must not be negative")
	case o.Workers < minWorkers:
		return clikit.Usagef("--effects-workers must be at least %d", minWorkers)
	case o.CallTimeout <= 0:
		return clikit.Usagef("--effects-call-timeout must be positive")
	case o.Lease < 0 || o.Lease > 0 && o.Lease <= o.CallTimeout:
		return clikit.Usagef("--effects-lease must exceed --effects-call-timeout (%s): a live call must end before its claim", o.CallTimeout)
	case o.ReconcileInterval <= 0:
		return clikit.Usagef("--effects-reconcile-interval must be positive")
	case o.RescueAfter < 0 || o.RescueAfter > 0 && o.RescueAfter < 2*o.CallTimeout+5*time.Second:
		// River refuses a rescue before its job timeout (effects.Recovery.JobTimeout).
		return clikit.Usagef("--effects-rescue-after must be at least River's job timeout, 2 × --effects-call-timeout + 5s (%s)", 2*o.CallTimeout+5*time.Second)
	}
	return nil
}

// apply sets the flags in cfg.
func (o *effectsFlags) apply(cfg *effects.Config) {
	if o.Workers > 0 {
		cfg.Workers = o.Workers
	}
	cfg.Timeout, cfg.Lease, cfg.ReconcileInterval, cfg.RescueAfter = o.CallTimeout, o.Lease, o.ReconcileInterval, o.RescueAfter
}

// logRecovery logs fx's recovery policy as a started executor's.
func logRecovery(logger *slog.Logger, fx *effects.Client, workers int) {
	r := fx.Recovery()
	logger.Info("effects workers started", "workers", workers, "kinds", strings.Join(fx.Kinds(), ","),
		"call_timeout", r.CallTimeout, "lease", r.Lease, "reconcile_interval", r.ReconcileInterval,
		"rescue_after", r.RescueAfter, "intent_recovery_bound", r.IntentBound, "river_job_bound", r.JobBound)
}

// effectsGroup is the effects command and its subcommands.
func (a *App) effectsGroup() *cobra.Command {
	return a.group("effects", "inspect, retry, cancel and perform effects that leave Postgres",
		`Effects are calls to other systems — webhooks, e-mails, payment gateways —
that projections ask for: each is an intent recorded in the transaction that
applies its event, keyed by the fact (projection, event id, effect kind), and
performed afterwards by a River worker with that key as its idempotency key.
'run' performs them beside the projection workers; 'effects work' alone.

An intent is pending, running (an attempt holds it), retrying (River retries
it after a backoff), done, failed (a permanent error, or the attempts ran out:
it waits for 'effects retry' or 'effects cancel') or cancelled. "uncertain"
marks one whose last call may or may not have reached the other side; its
next attempt asks the other side first, if its handler can.`,
		(&effectsListCmd{a}).command(),
		(&effectsShowCmd{a}).command(),
		(&effectsActionCmd{a: a}).command(),
		(&effectsActionCmd{a: a, cancel: true}).command(),
		(&effectsReconcileCmd{a}).command(),
		(&effectsWorkCmd{a}).command(),
	)
}

// --- list ---

type effectsListOptions struct {
	opOptions
	a          *App
	State      string
	Kind       string
	Projection string
	Orphaned   bool
	Limit      int
}

func (o *effectsListOptions) validate(args []string) error {
	if err := clikit.NoArgs(args); err != nil {
		return err
	}
	if o.State != "" {
		known := false
		for _, s := range effects.States {
			known = known || string(s) == o.State
		}
		if !known {
			return clikit.Usagef("--state must be one of %v, not %q", effects.States, o.State)
		}
	}
	if o.Limit < 1 {
		return clikit.Usagef("--limit must be at least 1")
	}
	return o.opOptions.validate()
}

type effectsListCmd struct{ a *App }

func (c *effectsListCmd) command() *cobra.Command {
	return leaf("list", "list effect intents, oldest first",
		`Lists the effect intents, oldest first, filtered by --state, --kind and
--projection: their key, what caused them, their state, attempts and last
error. 'effects list --state failed' is what waits for an operator.

ORPHANED = yes marks an intent whose executor died (its claim expired, or
its River job ran under a client that is gone) and that no River job will
take up yet: any running worker's reconciliation pass gives it one, within
its recovery bound (--effects-lease + --effects-reconcile-interval of 'run'
or 'effects work'); if they stay, no worker runs. --orphaned lists only
those. RECOVERED counts the times a pass took the intent up after its
executor died. Handlers are not needed: a binary without them lists the
table. Read-only.`,
		func(fs *pflag.FlagSet) *effectsListOptions {
			o := &effectsListOptions{a: c.a}
			bindOp(fs, &o.opOptions)
			fs.StringVar(&o.State, "state", "", "only intents in this `state` (pending, running, retrying, failed, done, cancelled)")
			fs.StringVar(&o.Kind, "kind", "", "only this effect `kind`")
			fs.StringVar(&o.Projection, "projection", "", "only intents recorded by this `projection`")
			fs.BoolVar(&o.Orphaned, "orphaned", false, "only intents whose executor died and that no job will take up yet")
			fs.IntVar(&o.Limit, "limit", 100, "at most this many `rows`")
			return o
		}, c.Run)
}

// Run lists intents.
func (c *effectsListCmd) Run(ctx context.Context, o *effectsListOptions) error {
	fx, _, closeFn, err := c.a.openEffects(ctx, &o.opOptions)
	if err != nil {
		return err
	}
	defer closeFn()
	rows, err := fx.List(ctx, effects.ListOptions{State: effects.State(o.State), Kind: o.Kind, Projection: o.Projection,
		Orphaned: o.Orphaned, Limit: o.Limit})
	if err != nil {
		return err
	}
	if o.out.JSON {
		return clikit.WriteJSON(c.a.stdout, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(c.a.stdout, "no effect intents")
		return nil
	}
	t := clikit.NewTable(c.a.stdout, "KEY", "KIND", "PROJECTION", "AGGREGATE", "VERSION", "STATE", "ATTEMPTS", "UNCERTAIN", "ORPHANED", "RECOVERED", "RECORDED", "LAST ERROR")
	for _, e := range rows {
		t.Row(e.Key, e.Kind, e.Projection, e.Aggregate, e.Version, e.State, e.Attempts, yesNo(e.Uncertain), yesNo(e.Orphaned), e.Recoveries, e.CreatedAt, e.LastError)
	}
	return t.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// --- show ---

type effectsShowOptions struct {
	opOptions
	Key string
}

func (o *effectsShowOptions) validate(args []string) error {
	key, err := clikit.OneArg(args, "key")
	if err != nil {
		return err
	}
	o.Key = key
	return o.opOptions.validate()
}

type effectsShowCmd struct{ a *App }

func (c *effectsShowCmd) command() *cobra.Command {
	return leaf("show <key>", "show one effect intent",
		`Shows one effect intent: what caused it (projection, event, aggregate,
version), its arguments, state, attempts, whether its last outcome is
uncertain, its claim, River job, whether its executor died and no job will
take it up yet (orphaned), how often it was taken up after one died, and its
last error. Read-only.`,
		func(fs *pflag.FlagSet) *effectsShowOptions {
			o := &effectsShowOptions{}
			bindOp(fs, &o.opOptions)
			return o
		}, c.Run)
}

// Run shows an intent.
func (c *effectsShowCmd) Run(ctx context.Context, o *effectsShowOptions) error {
	fx, _, closeFn, err := c.a.openEffects(ctx, &o.opOptions)
	if err != nil {
		return err
	}
	defer closeFn()
	e, err := fx.Get(ctx, o.Key)
	if err != nil {
		return err
	}
	if o.out.JSON {
		return clikit.WriteJSON(c.a.stdout, e)
	}
	t := clikit.NewTable(c.a.stdout)
	t.Row("key", e.Key)
	t.Row("kind", e.Kind)
	t.Row("projection", e.Projection)
	t.Row("event", e.EventID)
	t.Row("aggregate", e.Aggregate)
	t.Row("version", e.Version)
	if e.Discriminator != "" {
		t.Row("discriminator", e.Discriminator)
	}
	if e.Salt != "" {
		t.Row("salt", e.Salt)
	}
	t.Row("state", e.State)
	t.Row("uncertain", yesNo(e.Uncertain))
	t.Row("attempts", e.Attempts)
	t.Row("orphaned", yesNo(e.Orphaned))
	t.Row("recovered", e.Recoveries)
	t.Row("recorded", e.CreatedAt)
	t.Row("updated", e.UpdatedAt)
	if !e.LeaseUntil.IsZero() {
		t.Row("claimed until", e.LeaseUntil)
	}
	if !e.DoneAt.IsZero() {
		t.Row("done", e.DoneAt)
	}
	if e.JobID != 0 {
		t.Row("river job", e.JobID)
	}
	t.Row("last error", e.LastError)
	t.Row("args", string(e.Args))
	return t.Flush()
}

// --- retry, cancel ---

type effectsActionOptions struct {
	opOptions
	actOptions
	cancel bool
	Reason string
	Keys   []string
}

func (o *effectsActionOptions) validate(args []string) error {
	if len(args) == 0 {
		return clikit.Usagef("missing <key>")
	}
	o.Keys = args
	if o.cancel && o.Reason == "" {
		return clikit.Usagef("--reason is required")
	}
	return o.opOptions.validate()
}

type effectsActionCmd struct {
	a      *App
	cancel bool
}

func (c *effectsActionCmd) command() *cobra.Command {
	bind := func(fs *pflag.FlagSet) *effectsActionOptions {
		o := &effectsActionOptions{cancel: c.cancel}
		bindOp(fs, &o.opOptions)
		if c.cancel {
			bindAct(fs, &o.actOptions, "print the intents that would be cancelled, and the refusals")
		} else {
			bindAct(fs, &o.actOptions, "print the intents that would be reopened and queued, and the refusals")
		}
		if c.cancel {
			fs.StringVar(&o.Reason, "reason", "", "why the effect is given up, for the intent and the operator log (required)")
		}
		return o
	}
	if c.cancel {
		return leaf("cancel <key>...", "give up effect intents: they are never performed",
			`Gives up the intents: they are never performed again (a job already queued
for one completes without calling anything). An intent that is done cannot
be cancelled, nor one whose attempt is under way (try again once it ended).
A cancelled intent can still be retried. --dry-run runs the statement in a
transaction it rolls back and prints what it would do.

Changes: the intents' state and last error, and the operator log (with --by).`, bind, c.Run)
	}
	return leaf("retry <key>...", "perform failed or cancelled effect intents again",
		`Reopens the intents — failed, cancelled, or still waiting — and queues a
River job for each now. An intent whose last call may have reached the other
side is asked about first, if its handler can, so a retry does not repeat an
effect that happened. An intent that is done, or whose attempt is under way,
is refused. --dry-run runs the statements in a transaction it rolls back and
prints what it would do.

Changes: the intents' state, River's job table and the operator log (with --by).`, bind, c.Run)
}

// ActionResult reports what effects retry or cancel did with one intent.
type ActionResult struct {
	Action string        `json:"action"`
	Key    string        `json:"key"`
	State  effects.State `json:"state,omitempty"`
	Error  string        `json:"error,omitempty"`
	// DryRun is set when nothing was changed: State is the state the
	// action would leave the intent in.
	DryRun bool `json:"dry_run,omitempty"`
}

// Run retries or cancels every key; it fails if any was refused.
func (c *effectsActionCmd) Run(ctx context.Context, o *effectsActionOptions) error {
	fx, proc, closeFn, err := c.a.openEffects(ctx, &o.opOptions)
	if err != nil {
		return err
	}
	defer closeFn()
	action := "effect-retry"
	if o.cancel {
		action = "effect-cancel"
	}
	var results []ActionResult
	var errs []error
	for _, key := range o.Keys {
		var e effects.Effect
		var err error
		switch {
		case o.cancel && o.DryRun:
			e, err = fx.DryRunCancel(ctx, key, o.Reason)
		case o.cancel:
			e, err = fx.Cancel(ctx, key, o.Reason)
		case o.DryRun:
			e, err = fx.DryRunRetry(ctx, key)
		default:
			e, err = fx.Retry(ctx, key)
		}
		r := ActionResult{Action: action, Key: key, DryRun: o.DryRun}
		if err != nil {
			r.Error = err.Error()
			errs = append(errs, err)
			results = append(results, r)
			continue
		}
		r.State = e.State
		results = append(results, r)
		if o.DryRun {
			continue
		}
		v := e.Version
		if _, err := proc.LogAction(ctx, projection.Action{Action: action, Projection: e.Projection, Aggregate: e.Aggregate,
			From: &v, To: &v, By: cmp.Or(o.By, c.a.actor()), Reason: fmt.Sprintf("effect %s (%s): %s", key, e.Kind, o.Reason)}); err != nil {
			errs = append(errs, err)
		}
	}
	if o.out.JSON {
		if err := clikit.WriteJSON(c.a.stdout, results); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			switch {
			case r.Error != "":
				fmt.Fprintf(c.a.stdout, "%s: %s: refused: %s\n", r.Action, r.Key, r.Error)
			case r.DryRun:
				fmt.Fprintf(c.a.stdout, "%s: %s: would be %s (dry run: nothing changed)\n", r.Action, r.Key, r.State)
			default:
				fmt.Fprintf(c.a.stdout, "%s: %s: now %s\n", r.Action, r.Key, r.State)
			}
		}
	}
	return errors.Join(errs...)
}

// --- reconcile ---

type effectsReconcileOptions struct{ opOptions }

func (o *effectsReconcileOptions) validate(args []string) error {
	if err := clikit.NoArgs(args); err != nil {
		return err
	}
	return o.opOptions.validate()
}

type effectsReconcileCmd struct{ a *App }

func (c *effectsReconcileCmd) command() *cobra.Command {
	return leaf("reconcile", "run the effects' reconciliation pass now",
		`Runs the reconciliation pass that workers run every
--effects-reconcile-interval: intents whose executor died (their attempt's
claim expired, or their River job, or their batch's relay job, ran under a
client that is gone) get a new job, and failed intents whose last call may
have reached the other side are asked about (if their handler can — which
needs a binary with handlers): those the other side has become done.

Changes: those intents' state, River's job table; it calls the other sides'
status checks (never the effects themselves).`,
		func(fs *pflag.FlagSet) *effectsReconcileOptions {
			o := &effectsReconcileOptions{}
			bindOp(fs, &o.opOptions)
			return o
		}, c.Run)
}

// Run runs one pass.
func (c *effectsReconcileCmd) Run(ctx context.Context, o *effectsReconcileOptions) error {
	fx, _, closeFn, err := c.a.openEffects(ctx, &o.opOptions)
	if err != nil {
		return err
	}
	defer closeFn()
	r, err := fx.ReconcileStuck(ctx)
	if err != nil {
		return err
	}
	if o.out.JSON {
		return clikit.WriteJSON(c.a.stdout, r)
	}
	fmt.Fprintf(c.a.stdout, "requeued %d intents whose executor died (%d claims expired, %d jobs and %d relay jobs of dead clients); asked about %d failed uncertain intents: %d done, %d not done\n",
		r.Requeued, r.Causes[effects.RecoveredClaimExpired], r.Causes[effects.RecoveredJobDied], r.Causes[effects.RecoveredRelayDied], r.Checked, r.Done, r.NotDone)
	return nil
}

// --- work ---

type effectsWorkOptions struct {
	log          clikit.LogOptions
	db           clikit.DBOptions
	http         clikit.HTTPOptions
	fx           effectsFlags
	DrainTimeout time.Duration
}

func (o *effectsWorkOptions) validate(args []string) error {
	if err := clikit.NoArgs(args); err != nil {
		return err
	}
	for _, v := range []interface{ Validate() error }{&o.log, &o.db, &o.http} {
		if err := v.Validate(); err != nil {
			return err
		}
	}
	if o.DrainTimeout <= 0 {
		return clikit.Usagef("--drain-timeout must be positive")
	}
	return o.fx.validate(1)
}

type effectsWorkCmd struct{ a *App }

func (c *effectsWorkCmd) command() *cobra.Command {
	return leaf("work", "perform effect intents, without projection workers",
		`Performs the effect intents the projections record — what 'run' does beside
its projection workers — with --effects-workers calls at a time, each cut
off after --effects-call-timeout, and runs the reconciliation pass every
--effects-reconcile-interval. Any number of processes may work at once: an
intent is claimed by one attempt at a time.

Recovery: an executor that dies (SIGKILL, a lost machine) leaves its intents
to the others. An attempt holds its intent for --effects-lease; once that
passed — or once a River job ran that long under a dead client without
holding its intent —, the next pass of any running worker gives the intent
a new job: it is attempted again within --effects-lease +
--effects-reconcile-interval (+ River's poll, 1s) of the death, with the same
idempotency key (see docs/operations.md, "Effects"). River's own rows of the
dead client are retried by River's leader after --effects-rescue-after.

It serves /healthz, /readyz, /metrics and /v1/status on --http-addr when set.
The first SIGINT/SIGTERM lets the calls under way finish and record their
outcome (at most --drain-timeout); a second one stops at once (the intents
they held are taken up again once their claims expire).

Changes: the intents' state and River's job table; it calls the other sides.`,
		func(fs *pflag.FlagSet) *effectsWorkOptions {
			o := &effectsWorkOptions{}
			clikit.BindLog(fs, &o.log, "info")
			clikit.BindDB(fs, &o.db)
			clikit.BindHTTP(fs, &o.http, "")
			bindEffects(fs, &o.fx, c.a.cfg.EffectsConfig, "effects performed at once by this process")
			fs.DurationVar(&o.DrainTimeout, "drain-timeout", 30*time.Second, "longest graceful stop after the first signal")
			return o
		}, c.Run)
}

// Run works intents until the first signal.
func (c *effectsWorkCmd) Run(ctx context.Context, o *effectsWorkOptions) error {
	if err := c.a.requireEffects(); err != nil {
		return err
	}
	logger := o.log.Logger(c.a.stderr)
	con := clikit.NewConsole(c.a.stderr, &o.log)
	pool, err := clikit.Connect(ctx, &o.db, int32(effectsConns(o.fx.Workers)+3), logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := c.a.prepareSchema(ctx, pool, &o.db, false, false, logger); err != nil {
		return err
	}
	presence, err := migrations.Announce(ctx, pool, o.db.Schema, logger)
	if err != nil {
		return err
	}
	defer presence.Close()
	proc, m, closeMetrics, err := clikit.InstrumentedProcessor(ctx, pool, &o.db, c.a.cfg.Processor, c.a.cfg.Projections, c.a.version(), false, logger)
	if err != nil {
		return err
	}
	defer closeMetrics()
	fx, err := c.a.effectsClient(pool, &o.db, logger, &o.fx)
	if err != nil {
		return err
	}
	if err := fx.RegisterMetrics(m.Registry()); err != nil {
		return fmt.Errorf("effects metrics: %w", err)
	}
	ready := clikit.NewReadiness(pool, o.db.Schema)
	var srv *clikit.Server
	if o.http.Addr != "" {
		if srv, err = clikit.StartHTTP(&o.http, clikit.Serve{Processor: proc, Effects: fx, Ready: ready, Metrics: m, Logger: logger}); err != nil {
			return err
		}
		con.Printf([]any{"url", srv.URL()}, "serving %s", srv.URL())
	}
	if err := fx.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	ready.Set(true, "")
	logRecovery(logger.With("schema", o.db.Schema, "river_schema", o.db.River()), fx, o.fx.Workers)
	var httpErr error
	select {
	case <-c.a.drain.Done():
	case <-ctx.Done():
	case httpErr = <-srv.Err():
	}
	ready.Set(false, "draining")
	logger.Info("draining: finishing the effects under way (signal again to stop at once)")
	err = stopEffects(ctx, fx, o.DrainTimeout)
	if srv != nil {
		if serr := srv.Shutdown(5 * time.Second); serr != nil && httpErr == nil {
			httpErr = serr
		}
	}
	logger.Info("effects workers stopped")
	if err != nil {
		return err
	}
	if httpErr != nil {
		return fmt.Errorf("http: %w", httpErr)
	}
	return nil
}

// effectsConns is how many connections performing workers effects at once
// needs: River's listener, fetcher and completer, and one per call being
// claimed or settled (brief statements; a call holds none while it runs).
func effectsConns(workers int) int { return 3 + min(workers, 10) }

// stopEffects stops fx: the calls under way finish within drain, or when
// ctx (the second signal) ends, whichever comes first.
func stopEffects(ctx context.Context, fx *effects.Client, drain time.Duration) error {
	sctx, cancel := context.WithTimeout(ctx, drain)
	defer cancel()
	if err := fx.Stop(sctx); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}
