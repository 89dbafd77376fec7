package cli

import (
	"context"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
)

// This file holds the conflicts list command.

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
it with 'conflicts ack'. --open leaves acknowledged ones out. The live
generation of each projection (GEN) unless --generation or
--all-generations says otherwise. Read-only; page with --after-id.`,
		func(fs *pflag.FlagSet) *conflictsListOptions {
			o := &conflictsListOptions{listOptions: listOptions{a: c.a}}
			o.bind(fs, 100, "rows", "projection", "generation", "aggregate", "after-id")
			fs.BoolVar(&o.Open, "open", false, "only conflicts no operator acknowledged")
			return o
		}, c.Run)
}

// Run lists conflicts.
func (c *conflictsListCmd) Run(ctx context.Context, o *conflictsListOptions) error {
	return runList(ctx, c.a, &o.opOptions, func(ctx context.Context, proc *projection.Processor) ([]projection.ConflictEntry, error) {
		lo := o.listOpts()
		lo.Open = o.Open
		return proc.Conflicts(ctx, lo)
	}, listing[projection.ConflictEntry]{
		headers: []string{"ID", "PROJECTION", "GEN", "AGGREGATE", "VERSION", "HELD BY", "EXISTING ID", "INCOMING ID", "TYPE", "COUNT", "LAST SEEN", "ACKNOWLEDGED"},
		cells: func(x projection.ConflictEntry) []any {
			acked := "no"
			if !x.AcknowledgedAt.IsZero() {
				acked = clikit.AgeOf(x.AcknowledgedAt) + " ago"
			}
			return []any{x.ID, x.Projection, x.Generation, x.Aggregate, x.Version, x.ExistingState, x.ExistingEventID, x.IncomingEventID, x.Type, x.Count, clikit.AgeOf(x.LastSeen) + " ago", acked}
		},
	})
}
