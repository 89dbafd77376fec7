package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
)

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
