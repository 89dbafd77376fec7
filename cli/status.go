package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/httpapi"
	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
)

// This file holds the status command (operator.go has what it shares with
// the other operator commands).

// statusOptions configures status.
type statusOptions struct{ opOptions }

func (o *statusOptions) validate(args []string) error {
	if err := clikit.NoArgs(args); err != nil {
		return err
	}
	return o.opOptions.validate()
}

// statusCmd prints the state of every projection.
type statusCmd struct{ a *App }

func (c *statusCmd) command() *cobra.Command {
	return leaf("status", "show every projection's gate state, rejected events and checkpoints",
		`Shows, per projection: the aggregates seen, the events applied, the events
parked and the age of the oldest, the quarantined events and the conflicts
recorded; then the rejected deliveries and the sources' checkpoints; then the
open effect intents per kind (pending, running, retrying, failed, uncertain,
orphaned — their executor died and no job will take them up yet —, the
oldest waiting): every kind of the binary's handlers, and any other kind
the effects table holds open intents of (a binary without handlers shows
those). Read-only.`,
		func(fs *pflag.FlagSet) *statusOptions {
			o := &statusOptions{}
			bindOp(fs, &o.opOptions)
			return o
		}, c.Run)
}

// Run prints the status.
func (c *statusCmd) Run(ctx context.Context, o *statusOptions) error {
	fx, proc, closeFn, err := c.a.openEffects(ctx, &o.opOptions)
	if err != nil {
		return err
	}
	defer closeFn()
	st, err := httpapi.Status(ctx, proc, fx)
	if err != nil {
		return err
	}
	if o.out.JSON {
		return clikit.WriteJSON(c.a.stdout, st)
	}
	t := clikit.NewTable(c.a.stdout, "PROJECTION", "AGGREGATES", "EVENTS", "PARKED", "PARKED AGGS", "OLDEST PARKED", "QUARANTINED", "CONFLICTS")
	for _, p := range st.Projections {
		t.Row(p.Name, p.Aggregates, p.Events, p.Parked, p.ParkedAggregates, clikit.AgeOf(p.OldestParked), p.Quarantined, p.Conflicts)
	}
	if err := t.Flush(); err != nil {
		return err
	}
	for _, note := range statusNotes(o.db.Schema, st.Status) {
		fmt.Fprintln(c.a.stdout, note)
	}
	for _, p := range st.Projections {
		if l := p.Owner; l != nil {
			fmt.Fprintf(c.a.stdout, "owner: %s is owned by %s (--owner; token %d, for %s; other writers' transactions: %d)\n",
				p.Name, l.Holder, l.Token, clikit.AgeOf(l.TakenAt), l.OtherWrites)
		}
	}
	if len(st.Generations) > len(st.Projections) {
		// Some projection has more than its live generation: a rebuild.
		fmt.Fprintln(c.a.stdout)
		t := clikit.NewTable(c.a.stdout, "PROJECTION", "GENERATION", "CODE VERSION", "STATE", "PHASE", "APPLIED", "REBUILD READ", "LAG")
		for _, g := range st.Generations {
			lag := "-"
			if g.Lag > 0 {
				lag = clikit.Age(g.Lag)
			}
			t.Row(g.Projection, g.Generation, g.CodeVersion, g.State, g.Phase, appliedCell(g.Applied), g.Events, lag)
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(c.a.stdout, "\nrejected deliveries: %d (%d pending: 'rejected list --pending')\n", st.Rejected.Total, st.Rejected.Pending)
	if len(st.Checkpoints) > 0 {
		fmt.Fprintln(c.a.stdout)
		t := clikit.NewTable(c.a.stdout, "CHECKPOINT", "POSITION", "UPDATED")
		for _, cp := range st.Checkpoints {
			t.Row(cp.Name, cp.Position.String(), clikit.Age(cp.Age)+" ago")
		}
		if err := t.Flush(); err != nil {
			return err
		}
	}
	if len(st.Effects) > 0 {
		fmt.Fprintln(c.a.stdout)
		t := clikit.NewTable(c.a.stdout, "EFFECT KIND", "PENDING", "RUNNING", "RETRYING", "FAILED", "UNCERTAIN", "ORPHANED", "OLDEST PENDING")
		for _, k := range st.Effects {
			t.Row(k.Kind, k.Pending, k.Running, k.Retrying, k.Failed, k.Uncertain, k.Orphaned, clikit.AgeOf(k.OldestPending))
		}
		return t.Flush()
	}
	return nil
}

// appliedCell renders a generation's applied count ("-": not measured).
func appliedCell(n *int64) any {
	if n == nil {
		return "-"
	}
	return *n
}

// statusNotes explains a status that would mislead on its own: the
// binary's projections empty in a schema that holds other projections.
func statusNotes(schema string, st projection.Status) []string {
	if len(st.Others) == 0 {
		return nil
	}
	var empty []string
	for _, p := range st.Projections {
		if p.Aggregates == 0 && p.Events == 0 && p.Parked == 0 && p.Quarantined == 0 {
			empty = append(empty, p.Name)
		}
	}
	if len(empty) == 0 {
		return []string{fmt.Sprintf("note: schema %s also holds projections this binary does not have: %s",
			schema, strings.Join(st.Others, ", "))}
	}
	return []string{fmt.Sprintf("note: schema %s holds no state of %s; it holds %s, which this binary does not have: "+
		"run status with the binary that has them, or name the schema of %s with --schema",
		schema, strings.Join(empty, ", "), strings.Join(st.Others, ", "), strings.Join(empty, ", "))}
}
