package cli

import (
	"cmp"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/clikit"
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
