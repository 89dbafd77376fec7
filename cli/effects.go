package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
)

// effectsGroup is the effects command and its subcommands.
func (a *App) effectsGroup() *cobra.Command {
	return a.group("effects", "inspect, retry, cancel and perform effects that leave Postgres",
		`Effects are calls to other systems — webhooks, e-mails, payment gateways —
that projections ask for: each is an intent recorded in the transaction that
applies its event, keyed by the fact (projection, event id, effect kind), and
performed afterwards by a River worker with that key as its idempotency key.
'run' performs them beside the projection workers; 'effects work' alone.

An intent is pending, running (an attempt holds it), retrying (River retries
it after a backoff), done, failed (a permanent error, or the attempts ran out:
it waits for 'effects retry' or 'effects cancel') or cancelled. "uncertain"
marks one whose last call may or may not have reached the other side; its
next attempt asks the other side first, if its handler can.`,
		(&effectsListCmd{a}).command(),
		(&effectsShowCmd{a}).command(),
		(&effectsActionCmd{a: a}).command(),
		(&effectsActionCmd{a: a, cancel: true}).command(),
		(&effectsReconcileCmd{a}).command(),
		(&effectsWorkCmd{a}).command(),
	)
}

// --- list ---

type effectsListOptions struct {
	opOptions
	a          *App
	State      string
	Kind       string
	Projection string
	Orphaned   bool
	Limit      int
}

func (o *effectsListOptions) validate(args []string) error {
	if err := clikit.NoArgs(args); err != nil {
		return err
	}
	if o.State != "" {
		known := false
		for _, s := range effects.States {
			known = known || string(s) == o.State
		}
		if !known {
			return clikit.Usagef("--state must be one of %v, not %q", effects.States, o.State)
		}
	}
	if o.Limit < 1 {
		return clikit.Usagef("--limit must be at least 1")
	}
	return o.opOptions.validate()
}

type effectsListCmd struct{ a *App }

func (c *effectsListCmd) command() *cobra.Command {
	return leaf("list", "list effect intents, oldest first",
		`Lists the effect intents, oldest first, filtered by --state, --kind and
--projection: their key, what caused them, their state, attempts and last
error. 'effects list --state failed' is what waits for an operator.

ORPHANED = yes marks an intent whose executor died (its claim expired, or
its River job ran under a client that is gone) and that no River job will
take up yet: any running worker's reconciliation pass gives it one, within
its recovery bound (--effects-lease + --effects-reconcile-interval of 'run'
or 'effects work'); if they stay, no worker runs. --orphaned lists only
those. RECOVERED counts the times a pass took the intent up after its
executor died. Handlers are not needed: a binary without them lists the
table. Read-only.`,
		func(fs *pflag.FlagSet) *effectsListOptions {
			o := &effectsListOptions{a: c.a}
			bindOp(fs, &o.opOptions)
			fs.StringVar(&o.State, "state", "", "only intents in this `state` (pending, running, retrying, failed, done, cancelled)")
			fs.StringVar(&o.Kind, "kind", "", "only this effect `kind`")
			fs.StringVar(&o.Projection, "projection", "", "only intents recorded by this `projection`")
			fs.BoolVar(&o.Orphaned, "orphaned", false, "only intents whose executor died and that no job will take up yet")
			fs.IntVar(&o.Limit, "limit", 100, "at most this many `rows`")
			return o
		}, c.Run)
}

// Run lists intents.
func (c *effectsListCmd) Run(ctx context.Context, o *effectsListOptions) error {
	fx, _, closeFn, err := c.a.openEffects(ctx, &o.opOptions)
	if err != nil {
		return err
	}
	defer closeFn()
	rows, err := fx.List(ctx, projection.ListOptions{State: o.State, Kind: o.Kind, Projection: o.Projection,
		Orphaned: o.Orphaned, Limit: o.Limit})
	if err != nil {
		return err
	}
	if o.out.JSON {
		return clikit.WriteJSON(c.a.stdout, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintln(c.a.stdout, "no effect intents")
		return nil
	}
	t := clikit.NewTable(c.a.stdout, "KEY", "KIND", "PROJECTION", "AGGREGATE", "VERSION", "STATE", "ATTEMPTS", "UNCERTAIN", "ORPHANED", "RECOVERED", "RECORDED", "LAST ERROR")
	for _, e := range rows {
		t.Row(e.Key, e.Kind, e.Projection, e.Aggregate, e.Version, e.State, e.Attempts, yesNo(e.Uncertain), yesNo(e.Orphaned), e.Recoveries, e.CreatedAt, e.LastError)
	}
	return t.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// --- show ---

type effectsShowOptions struct {
	opOptions
	Key string
}

func (o *effectsShowOptions) validate(args []string) error {
	key, err := clikit.OneArg(args, "key")
	if err != nil {
		return err
	}
	o.Key = key
	return o.opOptions.validate()
}

type effectsShowCmd struct{ a *App }

func (c *effectsShowCmd) command() *cobra.Command {
	return leaf("show <key>", "show one effect intent",
		`Shows one effect intent: what caused it (projection, event, aggregate,
version), its arguments, state, attempts, whether its last outcome is
uncertain, its claim, River job, whether its executor died and no job will
take it up yet (orphaned), how often it was taken up after one died, and its
last error. Read-only.`,
		func(fs *pflag.FlagSet) *effectsShowOptions {
			o := &effectsShowOptions{}
			bindOp(fs, &o.opOptions)
			return o
		}, c.Run)
}

// Run shows an intent.
func (c *effectsShowCmd) Run(ctx context.Context, o *effectsShowOptions) error {
	fx, _, closeFn, err := c.a.openEffects(ctx, &o.opOptions)
	if err != nil {
		return err
	}
	defer closeFn()
	e, err := fx.Get(ctx, o.Key)
	if err != nil {
		return err
	}
	if o.out.JSON {
		return clikit.WriteJSON(c.a.stdout, e)
	}
	t := clikit.NewTable(c.a.stdout)
	t.Row("key", e.Key)
	t.Row("kind", e.Kind)
	t.Row("projection", e.Projection)
	t.Row("event", e.EventID)
	t.Row("aggregate", e.Aggregate)
	t.Row("version", e.Version)
	if e.Discriminator != "" {
		t.Row("discriminator", e.Discriminator)
	}
	if e.Salt != "" {
		t.Row("salt", e.Salt)
	}
	t.Row("state", e.State)
	t.Row("uncertain", yesNo(e.Uncertain))
	t.Row("attempts", e.Attempts)
	t.Row("orphaned", yesNo(e.Orphaned))
	t.Row("recovered", e.Recoveries)
	t.Row("recorded", e.CreatedAt)
	t.Row("updated", e.UpdatedAt)
	if !e.LeaseUntil.IsZero() {
		t.Row("claimed until", e.LeaseUntil)
	}
	if !e.DoneAt.IsZero() {
		t.Row("done", e.DoneAt)
	}
	if e.JobID != 0 {
		t.Row("river job", e.JobID)
	}
	t.Row("last error", e.LastError)
	t.Row("args", string(e.Args))
	return t.Flush()
}
