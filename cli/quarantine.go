package cli

import (
	"context"
	"errors"
	"fmt"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
)

// This file holds the quarantine commands: list, retry and skip.

// quarantineListOptions configures quarantine list.
type quarantineListOptions struct{ listOptions }

// quarantineListCmd lists quarantined events.
type quarantineListCmd struct{ a *App }

func (c *quarantineListCmd) command() *cobra.Command {
	return leaf("list", "list quarantined events, the longest quarantined first",
		`Lists the events whose handler failed for good, one per aggregate at most,
with the last error and the attempts. Each blocks its aggregate: later
versions park behind it until an operator retries or skips it. The live
generation of each projection (GEN) unless --generation or
--all-generations says otherwise. Read-only.`,
		func(fs *pflag.FlagSet) *quarantineListOptions {
			o := &quarantineListOptions{listOptions{a: c.a}}
			o.bind(fs, 100, "rows", "projection", "generation", "aggregate")
			return o
		}, c.Run)
}

// Run lists the quarantine.
func (c *quarantineListCmd) Run(ctx context.Context, o *quarantineListOptions) error {
	return runList(ctx, c.a, &o.opOptions, func(ctx context.Context, proc *projection.Processor) ([]projection.QuarantineEntry, error) {
		return proc.Quarantined(ctx, o.listOpts())
	}, listing[projection.QuarantineEntry]{
		headers: []string{"PROJECTION", "GEN", "AGGREGATE", "VERSION", "TYPE", "ATTEMPTS", "QUARANTINED", "ERROR"},
		cells: func(q projection.QuarantineEntry) []any {
			return []any{q.Projection, q.Generation, q.Aggregate, q.Version, q.Type, q.Attempts, clikit.AgeOf(q.QuarantinedAt) + " ago", q.Error}
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
		what := "apply it in a transaction that is rolled back, and print what would change"
		if c.skip {
			what = "print the version it would skip to and the parked events it would apply"
		}
		o.actionOptions.bind(fs, what)
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

Changes: the aggregate's version (in its live generation, or --generation N),
the read model (the drained events) and the operator log (with --reason and
--by); the skipped event's effect is lost for good (a rebuild replays it
again). Prefer 'quarantine retry' once the handler is fixed. --dry-run does
it all in a transaction it rolls back and prints what would change.`, bind, c.Run)
	}
	return leaf("retry <aggregate>", "apply a quarantined event again, once its fault is fixed",
		`Applies the aggregate's quarantined event again — after the handler or the
data behind it was fixed — then the parked events waiting behind it. If it
fails again it stays quarantined (its attempts and error are updated) and
the command exits with status 1.

Changes: the read model, the aggregate's version (in its live generation, or
--generation N) and the operator log (with --by). --dry-run runs the handler
in a transaction it rolls back and prints what would change — or that it
would fail again.`, bind, c.Run)
}

// Run retries or skips.
func (c *quarantineActionCmd) Run(ctx context.Context, o *quarantineActionOptions) error {
	return c.a.runAction(ctx, &o.actionOptions, func(ctx context.Context, proc *projection.Processor, opts *projection.ActionOptions) (projection.ActionReport, error) {
		if o.skip {
			return proc.SkipQuarantined(ctx, o.Projection, o.Aggregate, opts)
		}
		rep, err := proc.RetryQuarantined(ctx, o.Projection, o.Aggregate, opts)
		var herr *projection.HandlerError
		if errors.As(err, &herr) {
			// The processor's error names the projection, action and
			// aggregate; say only what it cannot know.
			if opts.DryRun {
				return rep, fmt.Errorf("dry run, nothing changed: the event would fail again: %w", err)
			}
			return rep, fmt.Errorf("the event still fails and stays quarantined: %w", err)
		}
		return rep, err
	})
}
