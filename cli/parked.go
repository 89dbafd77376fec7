package cli

import (
	"context"
	"fmt"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"strconv"
	"time"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
)

// This file holds the parked commands: list, show and declare-gap.

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
events are parked and how long the oldest has waited: in the live generation
of each projection (GEN), or in --generation N, or in every generation
(--all-generations). Read-only.

An aggregate that waits long usually lacks an event the source has not
delivered: try 'parked repair', then, if the versions really do not exist,
'parked declare-gap'.`,
		func(fs *pflag.FlagSet) *parkedListOptions {
			o := &parkedListOptions{listOptions: listOptions{a: c.a}}
			o.bind(fs, 100, "rows", "projection", "generation", "aggregate")
			fs.DurationVar(&o.OlderThan, "older-than", 0, "only aggregates whose oldest parked event waited at least this `duration`")
			return o
		}, c.Run)
}

// Run lists waiting aggregates.
func (c *parkedListCmd) Run(ctx context.Context, o *parkedListOptions) error {
	return runList(ctx, c.a, &o.opOptions, func(ctx context.Context, proc *projection.Processor) ([]projection.WaitingEntry, error) {
		lo := o.listOpts()
		lo.OlderThan = o.OlderThan
		return proc.Waiting(ctx, lo)
	}, listing[projection.WaitingEntry]{
		headers: []string{"PROJECTION", "GEN", "AGGREGATE", "APPLIED", "WAITING FOR", "PARKED", "VERSIONS", "OLDEST"},
		cells: func(w projection.WaitingEntry) []any {
			from, to := w.MissingFrom, w.MissingTo
			missing := strconv.FormatInt(from, 10)
			switch {
			case to > from:
				missing += "-" + strconv.FormatInt(to, 10)
			case to < from: // its next version is parked (see projection.WaitingEntry)
				missing = "nothing (next is parked)"
			}
			return []any{w.Projection, w.Generation, w.Aggregate, w.Current, missing, w.Parked, fmt.Sprintf("%d-%d", w.MinVersion, w.MaxVersion), clikit.AgeOf(w.Oldest)}
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
--projection) — their live generation unless --generation or
--all-generations says otherwise — with the applied version they wait
behind, and their data: JSON on one line, or base64: and the bytes' base64
when they are not JSON. Read-only.`,
		func(fs *pflag.FlagSet) *parkedShowOptions {
			o := &parkedShowOptions{listOptions{a: c.a}}
			o.bind(fs, 1000, "events", "projection", "generation")
			return o
		}, c.Run)
}

// Run shows the parked events.
func (c *parkedShowCmd) Run(ctx context.Context, o *parkedShowOptions) error {
	return runList(ctx, c.a, &o.opOptions, func(ctx context.Context, proc *projection.Processor) ([]projection.ParkedEntry, error) {
		return proc.Parked(ctx, o.listOpts())
	}, listing[projection.ParkedEntry]{
		headers: []string{"PROJECTION", "GEN", "APPLIED", "VERSION", "EVENT ID", "TYPE", "PARKED", "DATA"},
		cells: func(e projection.ParkedEntry) []any {
			return []any{e.Projection, e.Generation, e.Current, e.Version, e.EventID, e.Type, clikit.AgeOf(e.ParkedAt) + " ago", e.Data.String()}
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
the gap. The rejected deliveries of the declared versions (an event the
source holds but no projection can apply) are resolved with it.

Changes: the aggregate's version in --projection (its live generation, or
--generation N), the read model (the drained events are applied), the
rejected deliveries of those versions and the operator log (with --reason
and --by). It cannot be undone except by a rebuild. --to must be below the
first parked version; an aggregate in quarantine is refused (use
'quarantine'). --dry-run does all of it in a transaction it rolls back and
prints what would change.`,
		func(fs *pflag.FlagSet) *declareGapOptions {
			o := &declareGapOptions{actionOptions: actionOptions{a: c.a}}
			o.actionOptions.bind(fs, "print the versions it would declare missing and the parked events it would apply")
			fs.Int64Var(&o.To, "to", 0, "the last missing `version` (required)")
			fs.StringVar(&o.Reason, "reason", "", "why the versions are missing, for the operator log (required)")
			return o
		}, c.Run)
}

// Run declares the gap.
func (c *declareGapCmd) Run(ctx context.Context, o *declareGapOptions) error {
	return c.a.runAction(ctx, &o.actionOptions, func(ctx context.Context, proc *projection.Processor, opts *projection.ActionOptions) (projection.ActionReport, error) {
		return proc.DeclareGap(ctx, o.Projection, o.Aggregate, o.To, opts)
	})
}
