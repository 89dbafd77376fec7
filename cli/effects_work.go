package cli

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/migrations"
)

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
	return cmp.Or(
		clikit.ValidateAll(&o.log, &o.db, &o.http),
		clikit.Positive("drain-timeout", o.DrainTimeout),
		o.fx.validate(1),
	)
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
