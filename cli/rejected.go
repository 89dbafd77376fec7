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
