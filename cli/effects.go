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
	rows, err := fx.List(ctx, projection.ListOptions{State: o.State, Kind: o.Kind, Projection: o.Projection,
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
