package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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
(retry, skip, declare-gap, replay-rejected, dismiss-rejected, ack-conflict,
rebuild-start, rebuild-switch, rebuild-rollback, rebuild-drop, …) and every
finding the workers recorded (gap-missing-at-source), with the projection
and its generation, the aggregate, versions, reason and who acted (BY).
Filter with --projection, --generation, --aggregate and --action (every
generation's entries unless --generation says one: it is history); page
with --after-id (the ID of the last row shown). Read-only.`,
		func(fs *pflag.FlagSet) *oplogOptions {
			o := &oplogOptions{listOptions: listOptions{a: c.a}}
			o.bind(fs, 100, "rows", "projection", "aggregate", "after-id")
			fs.IntVar(&o.Generation, "generation", 0, "only entries about this `generation` of the projections")
			fs.StringVar(&o.Action, "action", "", "only this `action` (retry, skip, declare-gap, ack-conflict, gap-missing-at-source, …)")
			return o
		}, c.Run)
}

// Run lists the operator log.
func (c *oplogCmd) Run(ctx context.Context, o *oplogOptions) error {
	return runList(ctx, c.a, &o.opOptions, func(ctx context.Context, proc *projection.Processor) ([]projection.OperatorLogEntry, error) {
		lo := o.listOpts()
		lo.Action = o.Action
		return proc.OperatorLog(ctx, lo)
	}, listing[projection.OperatorLogEntry]{
		headers: []string{"ID", "AT", "ACTION", "PROJECTION", "GEN", "AGGREGATE", "VERSIONS", "REASON", "BY"},
		cells: func(e projection.OperatorLogEntry) []any {
			gen := "-"
			if e.Generation > 0 {
				gen = strconv.Itoa(e.Generation)
			}
			return []any{e.ID, e.At, e.Action, e.Projection, gen, e.Aggregate, versions(e.From, e.To), e.Reason, e.By}
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
	actOptions
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
--reason and --by). Nothing is applied; the read model is untouched.`,
		func(fs *pflag.FlagSet) *conflictsAckOptions {
			o := &conflictsAckOptions{}
			bindOp(fs, &o.opOptions)
			bindAct(fs, &o.actOptions, "print the conflict it would acknowledge")
			fs.StringVar(&o.Reason, "reason", "", "what was done about it, for the operator log (required)")
			return o
		}, c.Run)
}

// Run acknowledges the conflict.
func (c *conflictsAckCmd) Run(ctx context.Context, o *conflictsAckOptions) error {
	return c.a.report(ctx, &o.opOptions, func(proc *projection.Processor) (projection.ActionReport, error) {
		return proc.AckConflict(ctx, o.ID, o.options(c.a, 0, o.Reason))
	})
}
