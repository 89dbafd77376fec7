package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
)

// oplogOptions configures oplog.
type oplogOptions struct {
	listOptions
	Action string
}

// oplogCmd lists the operator log.
type oplogCmd struct{ a *App }

func (c *oplogCmd) command() *cobra.Command {
	return leaf("oplog", "list the operator log: every operator decision and source finding",
		`Lists the operator log, oldest first: every decision an operator made
(retry, skip, declare-gap, replay-rejected, ack-conflict, rebuild-start,
rebuild-done) and every finding the workers recorded (gap-missing-at-source),
with the projection, aggregate, versions and reason. Filter with
--projection, --aggregate and --action; page with --after-id (the ID of the
last row shown). Read-only.`,
		func(fs *pflag.FlagSet) *oplogOptions {
			o := &oplogOptions{listOptions: listOptions{a: c.a}}
			o.bind(fs, 100, "rows", "projection", "aggregate", "after-id")
			fs.StringVar(&o.Action, "action", "", "only this `action` (retry, skip, declare-gap, ack-conflict, gap-missing-at-source, …)")
			return o
		}, c.Run)
}

// Run lists the operator log.
func (c *oplogCmd) Run(ctx context.Context, o *oplogOptions) error {
	return runList(ctx, c.a, &o.opOptions, func(ctx context.Context, proc *projection.Processor) ([]projection.OperatorLogEntry, error) {
		return proc.OperatorLog(ctx, projection.ListOptions{Projection: o.Projection, Aggregate: o.Aggregate, Action: o.Action, AfterID: o.AfterID, Limit: o.Limit})
	}, listing[projection.OperatorLogEntry]{
		headers: []string{"ID", "AT", "ACTION", "PROJECTION", "AGGREGATE", "VERSIONS", "REASON"},
		cells: func(e projection.OperatorLogEntry) []any {
			return []any{e.ID, e.At, e.Action, e.Projection, e.Aggregate, versions(e.From, e.To), e.Reason}
		},
		empty: "the operator log is empty",
	})
}

// versions renders a version range of the operator log.
func versions(from, to *int64) string {
	switch {
	case from == nil && to == nil:
		return "-"
	case from == nil:
		return fmt.Sprint(*to)
	case to == nil || *to == *from:
		return fmt.Sprint(*from)
	}
	return fmt.Sprintf("%d-%d", *from, *to)
}

// conflictsAckOptions configures conflicts ack.
type conflictsAckOptions struct {
	opOptions
	ID     int64
	Reason string
}

func (o *conflictsAckOptions) validate(args []string) error {
	id, err := parseID(args, "conflict id", "the ID column of 'conflicts list'")
	if err != nil {
		return err
	}
	o.ID = id
	if err := needReason(o.Reason); err != nil {
		return err
	}
	return o.opOptions.validate()
}

// conflictsAckCmd acknowledges a conflict.
type conflictsAckCmd struct{ a *App }

func (c *conflictsAckCmd) command() *cobra.Command {
	return leaf("ack <id>", "acknowledge a conflict: an operator has dealt with it",
		`Acknowledges the recorded conflict with the given id (see 'conflicts list'):
an operator looked at it and fixed the source, or decided it needs nothing.
It stays listed (with its acknowledgement), no longer counts as open in
'status', /v1/status and the inorder_open_conflicts gauge, and a new delivery of
the same conflicting event does not reopen it.

Changes: the conflict's acknowledgement and the operator log (with
--reason). Nothing is applied; the read model is untouched.`,
		func(fs *pflag.FlagSet) *conflictsAckOptions {
			o := &conflictsAckOptions{}
			bindOp(fs, &o.opOptions)
			fs.StringVar(&o.Reason, "reason", "", "what was done about it, for the operator log (required)")
			return o
		}, c.Run)
}

// Run acknowledges the conflict.
func (c *conflictsAckCmd) Run(ctx context.Context, o *conflictsAckOptions) error {
	proc, closeFn, err := c.a.open(ctx, &o.opOptions)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := proc.AckConflict(ctx, o.ID, o.Reason); err != nil {
		return err
	}
	if o.out.JSON {
		return clikit.WriteJSON(c.a.stdout, map[string]any{"id": o.ID, "acknowledged": true, "reason": o.Reason})
	}
	_, err = fmt.Fprintf(c.a.stdout, "conflict %d acknowledged\n", o.ID)
	return err
}
