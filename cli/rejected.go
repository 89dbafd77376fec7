package cli

import (
	"context"
	"fmt"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"strconv"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
)

// This file holds the rejected commands: list and replay.

// rejectedListOptions configures rejected list (no --projection: rejected
// deliveries belong to none).
type rejectedListOptions struct {
	listOptions
	Pending bool
}

// rejectedListCmd lists rejected deliveries.
type rejectedListCmd struct{ a *App }

func (c *rejectedListCmd) command() *cobra.Command {
	return leaf("list", "list deliveries that failed validation, with the reason",
		`Lists deliveries whose envelope was invalid (no aggregate id, version below
1, no type, data or content type that is not JSON, payload too large, a type
no projection accepts), one row per bad event however often and by
whichever path it arrived, with the reason code and error, how often it was
delivered, and whether it is resolved: replayed, dismissed, or its version
declared missing. They were acknowledged to the source and applied nowhere.
--pending leaves resolved ones out. Read-only; page with --after-id.`,
		func(fs *pflag.FlagSet) *rejectedListOptions {
			o := &rejectedListOptions{listOptions: listOptions{a: c.a}}
			o.bind(fs, 100, "rows", "aggregate", "after-id")
			fs.BoolVar(&o.Pending, "pending", false, "only deliveries no operator resolved")
			return o
		}, c.Run)
}

// Run lists rejected deliveries.
func (c *rejectedListCmd) Run(ctx context.Context, o *rejectedListOptions) error {
	return runList(ctx, c.a, &o.opOptions, func(ctx context.Context, proc *projection.Processor) ([]projection.RejectedEntry, error) {
		lo := o.listOpts()
		lo.Open = o.Pending
		return proc.Rejected(ctx, lo)
	}, listing[projection.RejectedEntry]{
		headers: []string{"ID", "AGGREGATE", "VERSION", "TYPE", "REASON", "COUNT", "LAST SEEN", "RESOLVED", "ERROR"},
		cells: func(r projection.RejectedEntry) []any {
			resolved := "no"
			if !r.ResolvedAt.IsZero() {
				resolved = r.Resolution + " " + clikit.AgeOf(r.ResolvedAt) + " ago"
			}
			return []any{r.ID, r.Aggregate, r.Version, r.Type, r.Reason, r.Count, clikit.AgeOf(r.LastSeen) + " ago", resolved, r.Error}
		},
	})
}

// rejectedActionOptions configures rejected replay and dismiss.
type rejectedActionOptions struct {
	opOptions
	actOptions
	ID      int64
	Reason  string
	dismiss bool
}

func (o *rejectedActionOptions) validate(args []string) error {
	id, err := parseID(args, "rejected event id", "the ID column of 'rejected list'")
	if err != nil {
		return err
	}
	o.ID = id
	if o.dismiss {
		if err := needReason(o.Reason); err != nil {
			return err
		}
	}
	return o.opOptions.validate()
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
		`Validates the rejected delivery with the given id (see 'rejected list') again,
as it was delivered (its content type included), and, if it is valid now —
after what made it invalid was fixed (a raised payload limit, a newly
accepted type) — feeds it through the processor and marks it resolved
(replayed). If it is still invalid it stays pending, its reason and error
become this validation's, and the command exits with status 1.

Changes: like any delivery, it may apply, park or be discarded as a
duplicate; the entry's resolution and the operator log (with --reason and
--by) are updated. --dry-run feeds it in a transaction it rolls back and
prints what would become of it.`,
		func(fs *pflag.FlagSet) *rejectedActionOptions {
			o := &rejectedActionOptions{}
			bindOp(fs, &o.opOptions)
			bindAct(fs, &o.actOptions, "print what would become of it in each projection")
			fs.StringVar(&o.Reason, "reason", "", "why, for the operator log")
			return o
		}, c.Run)
}

// Run replays the rejected delivery.
func (c *rejectedReplayCmd) Run(ctx context.Context, o *rejectedActionOptions) error {
	return c.a.report(ctx, &o.opOptions, func(proc *projection.Processor) (projection.ActionReport, error) {
		rep, err := proc.ReplayRejected(ctx, o.ID, o.options(c.a, 0, o.Reason))
		if err != nil && o.DryRun {
			return rep, fmt.Errorf("rejected replay %d: dry run, nothing changed: %w", o.ID, err)
		}
		if err != nil {
			return rep, fmt.Errorf("rejected replay %d: %w", o.ID, err)
		}
		return rep, nil
	})
}

// rejectedDismissCmd dismisses a rejected delivery.
type rejectedDismissCmd struct{ a *App }

func (c *rejectedDismissCmd) command() *cobra.Command {
	return leaf("dismiss <id>", "resolve a rejected delivery without replaying it",
		`Marks the rejected delivery with the given id (see 'rejected list') resolved
without replaying it: an operator decided nothing will ever apply it (a test
event, garbage from a broken producer). It stays listed, no longer counts as
pending ('status', /v1/status, inorder_rejected_pending), and a new delivery
of the same event does not reopen it. If the aggregate waits for its version,
'parked declare-gap' is the decision to make instead (it resolves the
delivery too).

Changes: the entry's resolution and the operator log (with --reason and
--by). Nothing is applied.`,
		func(fs *pflag.FlagSet) *rejectedActionOptions {
			o := &rejectedActionOptions{dismiss: true}
			bindOp(fs, &o.opOptions)
			bindAct(fs, &o.actOptions, "print the delivery it would dismiss")
			fs.StringVar(&o.Reason, "reason", "", "why it is dismissed, for the operator log (required)")
			return o
		}, c.Run)
}

// Run dismisses the rejected delivery.
func (c *rejectedDismissCmd) Run(ctx context.Context, o *rejectedActionOptions) error {
	return c.a.report(ctx, &o.opOptions, func(proc *projection.Processor) (projection.ActionReport, error) {
		return proc.DismissRejected(ctx, o.ID, o.options(c.a, 0, o.Reason))
	})
}
