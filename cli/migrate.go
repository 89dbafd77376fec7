package cli

import (
	"context"
	"fmt"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/migrations"
)

// migrateOptions configures migrate.
type migrateOptions struct {
	log    clikit.LogOptions
	db     clikit.DBOptions
	out    clikit.OutputOptions
	DryRun bool
	Force  bool
}

func (o *migrateOptions) validate(args []string) error {
	if err := clikit.NoArgs(args); err != nil {
		return err
	}
	if err := o.log.Validate(); err != nil {
		return err
	}
	return o.db.Validate()
}

// migrateCmd applies inorder's migrations and creates the projections'
// read-model tables.
type migrateCmd struct{ a *App }

func (c *migrateCmd) command() *cobra.Command {
	return leaf("migrate", "apply inorder's migrations and create the projections' tables",
		`Applies the pending migrations embedded in this binary to --schema (creating
the schema and its schema_migrations table if needed), then River's own
migrations — the job queue that performs effects (package effects) — to
--river-schema (default: --schema), then creates the read-model tables of
every projection that has a Setup (CREATE TABLE IF NOT EXISTS, in the
connection's search_path).

Changes: creates the schema and tables; never drops or rewrites data. With
--dry-run it only prints the steps it would take and changes nothing.
Several processes may migrate at once: an advisory lock lets one apply the
steps while the others wait and then find nothing to do.

Online migrations run while workers of the previous release keep
processing events (a rolling upgrade). An offline one is refused, and
nothing applied, while other inorder workers are connected to --schema
('run' and 'effects work' processes, and older releases' sessions named
"inorder"): stop them first, or pass --force and let them fail or block
until it is done. 'migrate status' says which migrations are online.

Subcommand: 'migrate status' lists the migrations and whether they are applied.`,
		func(fs *pflag.FlagSet) *migrateOptions {
			o := &migrateOptions{}
			clikit.BindLog(fs, &o.log, "warn")
			clikit.BindDB(fs, &o.db)
			clikit.BindOutput(fs, &o.out)
			fs.BoolVar(&o.DryRun, "dry-run", false, "print the migrations that would be applied; change nothing")
			fs.BoolVar(&o.Force, "force", false, "apply offline migrations even while other inorder workers are connected")
			return o
		}, c.Run)
}

// Run applies the migrations.
func (c *migrateCmd) Run(ctx context.Context, o *migrateOptions) error {
	logger := o.log.Logger(c.a.stderr)
	pool, err := clikit.Connect(ctx, &o.db, 4, logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := migrations.New(pool, &migrations.Options{Schema: o.db.Schema, Logger: logger, DryRun: o.DryRun, Force: o.Force})
	if err != nil {
		return err
	}
	res, err := m.Migrate(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var workers []migrations.Worker
	if res.DryRun {
		if workers, err = m.Workers(ctx); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	river, err := effects.MigrateRiver(ctx, pool, &effects.RiverMigrateOptions{Schema: o.db.River(), DryRun: o.DryRun, Logger: logger})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	setup := false
	if !o.DryRun {
		proc, err := c.a.processor(pool, &o.db, logger)
		if err != nil {
			return err
		}
		if err := proc.Setup(ctx); err != nil {
			return err // the processor names the projection and the step
		}
		setup = true
	}
	if o.out.JSON {
		type step struct {
			Version    int     `json:"version"`
			Name       string  `json:"name"`
			Online     bool    `json:"online"`
			DurationMS float64 `json:"duration_ms"`
		}
		steps := make([]step, 0, len(res.Steps))
		for _, s := range res.Steps {
			steps = append(steps, step{s.Version, s.Name, s.Online, float64(s.Duration.Microseconds()) / 1000})
		}
		if river == nil {
			river = []int{}
		}
		out := map[string]any{
			"schema": o.db.Schema, "dry_run": res.DryRun, "steps": steps,
			"river_schema": o.db.River(), "river_versions": river,
			"projections_setup": setup, "projections": c.a.projectionNames(),
		}
		if res.DryRun {
			out["workers_connected"] = len(workers)
		}
		return clikit.WriteJSON(c.a.stdout, out)
	}
	verb := "applied"
	if res.DryRun {
		verb = "would apply"
	}
	if len(res.Steps) == 0 {
		fmt.Fprintf(c.a.stdout, "schema %s is up to date\n", o.db.Schema)
	}
	offline := 0
	for _, s := range res.Steps {
		kind := "online"
		if !s.Online {
			kind, offline = "offline", offline+1
		}
		fmt.Fprintf(c.a.stdout, "%s %03d_%s to schema %s", verb, s.Version, s.Name, o.db.Schema)
		if !res.DryRun {
			fmt.Fprintf(c.a.stdout, " in %s", clikit.Age(s.Duration))
		}
		fmt.Fprintf(c.a.stdout, " (%s)\n", kind)
	}
	if res.DryRun && offline > 0 && len(workers) > 0 && !o.Force {
		fmt.Fprintf(c.a.stdout, "%d inorder worker session(s) connected: the offline migrations would be refused (stop the workers, or --force)\n", len(workers))
	}
	switch {
	case len(river) > 0:
		fmt.Fprintf(c.a.stdout, "%s River's migrations %v to schema %s\n", verb, river, o.db.River())
	default:
		fmt.Fprintf(c.a.stdout, "River's tables in schema %s are up to date\n", o.db.River())
	}
	if setup {
		fmt.Fprintf(c.a.stdout, "read-model tables ready for %v\n", c.a.projectionNames())
	}
	return nil
}

// migrateStatusOptions configures migrate status.
type migrateStatusOptions struct {
	log clikit.LogOptions
	db  clikit.DBOptions
	out clikit.OutputOptions
}

func (o *migrateStatusOptions) validate(args []string) error {
	if err := clikit.NoArgs(args); err != nil {
		return err
	}
	if err := o.log.Validate(); err != nil {
		return err
	}
	return o.db.Validate()
}

// migrateStatusCmd lists the migrations and whether they are applied.
type migrateStatusCmd struct{ a *App }

func (c *migrateStatusCmd) command() *cobra.Command {
	return leaf("status", "list the migrations and whether they are applied",
		`Lists every migration embedded in this binary with whether and when it was
applied to --schema and whether it is online (runs while the previous
release's workers keep working) or offline (refused while workers are
connected), plus any applied version this binary does not know (the
database was migrated by a newer release); then River's migrations and
whether --river-schema has them. Read-only.`,
		func(fs *pflag.FlagSet) *migrateStatusOptions {
			o := &migrateStatusOptions{}
			clikit.BindLog(fs, &o.log, "warn")
			clikit.BindDB(fs, &o.db)
			clikit.BindOutput(fs, &o.out)
			return o
		}, c.Run)
}

// Run prints the migration status.
func (c *migrateStatusCmd) Run(ctx context.Context, o *migrateStatusOptions) error {
	logger := o.log.Logger(c.a.stderr)
	pool, err := clikit.Connect(ctx, &o.db, 2, logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := migrations.New(pool, &migrations.Options{Schema: o.db.Schema, Logger: logger})
	if err != nil {
		return err
	}
	st, err := m.Status(ctx)
	if err != nil {
		return fmt.Errorf("migrate status: %w", err)
	}
	river, err := effects.RiverMigrations(ctx, pool, o.db.River())
	if err != nil {
		return fmt.Errorf("migrate status: %w", err)
	}
	if o.out.JSON {
		type row struct {
			Version   int    `json:"version"`
			Name      string `json:"name"`
			Online    bool   `json:"online"`
			Applied   bool   `json:"applied"`
			AppliedAt string `json:"applied_at,omitempty"`
			Unknown   bool   `json:"unknown,omitempty"`
		}
		rows := make([]row, 0, len(st))
		for _, s := range st {
			r := row{Version: s.Version, Name: s.Name, Online: s.Online, Applied: s.Applied, Unknown: s.Unknown}
			if s.Applied {
				r.AppliedAt = s.AppliedAt.UTC().Format("2006-01-02T15:04:05.000Z07:00")
			}
			rows = append(rows, r)
		}
		return clikit.WriteJSON(c.a.stdout, map[string]any{"schema": o.db.Schema, "migrations": rows,
			"river_schema": o.db.River(), "river_migrations": river})
	}
	t := clikit.NewTable(c.a.stdout, "VERSION", "NAME", "KIND", "STATE", "APPLIED AT")
	for _, s := range st {
		state := "pending"
		switch {
		case s.Unknown:
			state = "unknown to this binary"
		case s.Applied:
			state = "applied"
		}
		kind := "offline"
		switch {
		case s.Online:
			kind = "online"
		case s.Unknown:
			kind = "?"
		}
		t.Row(fmt.Sprintf("%03d", s.Version), s.Name, kind, state, s.AppliedAt)
	}
	if err := t.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(c.a.stdout, "\nRiver (schema %s):\n", o.db.River())
	t = clikit.NewTable(c.a.stdout, "VERSION", "NAME", "STATE")
	for _, m := range river {
		state := "pending"
		if m.Applied {
			state = "applied"
		}
		t.Row(fmt.Sprintf("%03d", m.Version), m.Name, state)
	}
	return t.Flush()
}
