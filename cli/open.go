package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/migrations"
	"github.com/inorder/inorder/projection"
)

// prepareSchema applies pending migrations when migrate is set — inorder's
// to --schema and, in a binary with effect handlers, River's to
// --river-schema; otherwise it refuses to work on a schema that is missing
// or not fully migrated. offer says whether the command has a --migrate
// flag to mention.
func (a *App) prepareSchema(ctx context.Context, pool *pgxpool.Pool, db *clikit.DBOptions, migrate, offer bool, logger *slog.Logger) error {
	schema := db.Schema
	hint := fmt.Sprintf("run '%s migrate --schema %s' first", a.name, schema)
	if db.RiverSchema != "" {
		hint = fmt.Sprintf("run '%s migrate --schema %s --river-schema %s' first", a.name, schema, db.RiverSchema)
	}
	if offer {
		hint += " (or pass --migrate)"
	}
	if migrate {
		m, err := migrations.New(pool, &migrations.Options{Schema: schema, Logger: logger})
		if err != nil {
			return err
		}
		if _, err := m.Migrate(ctx); errors.Is(err, migrations.ErrWorkersConnected) {
			return fmt.Errorf("migrate: %w (run '%s migrate --force' to apply it anyway)", err, a.name)
		} else if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		if len(a.cfg.Effects) > 0 {
			if _, err := effects.MigrateRiver(ctx, pool, &effects.RiverMigrateOptions{Schema: db.River(), Logger: logger}); err != nil {
				return fmt.Errorf("migrate: %w", err)
			}
		}
		return nil
	}
	err := clikit.CheckSchema(ctx, pool, schema, logger)
	var se *clikit.SchemaError
	if errors.As(err, &se) && se.Unknown == 0 {
		return fmt.Errorf("%w: %s", err, hint)
	}
	if err != nil {
		return err
	}
	if len(a.cfg.Effects) > 0 {
		if err := effects.CheckRiver(ctx, pool, db.River()); errors.Is(err, effects.ErrRiverNotMigrated) {
			return fmt.Errorf("%w: %s", err, hint)
		} else if err != nil {
			return err
		}
	}
	return nil
}

// processor returns a processor of the configured projections on pool,
// with --schema; the projections that record effect intents are handed the
// effects client first (see effectsClient).
func (a *App) processor(pool *pgxpool.Pool, db *clikit.DBOptions, logger *slog.Logger) (*projection.Processor, error) {
	if _, err := a.effectsClient(pool, db, logger, nil); err != nil {
		return nil, err
	}
	pc := a.cfg.Processor
	pc.Schema = db.Schema
	pc.Logger = logger
	proc, err := projection.New(pool, &pc, a.cfg.Projections...)
	if err != nil {
		return nil, fmt.Errorf("processor: %w", err)
	}
	return proc, nil
}

// pickProjection returns name, or the only projection when name is empty.
func (a *App) pickProjection(name string) (string, error) {
	if name != "" {
		for _, p := range a.cfg.Projections {
			if p.Name() == name {
				return name, nil
			}
		}
		return "", clikit.Usagef("unknown projection %q (have: %s)", name, strings.Join(a.projectionNames(), ", "))
	}
	if len(a.cfg.Projections) == 1 {
		return a.cfg.Projections[0].Name(), nil
	}
	return "", clikit.Usagef("--projection is required: this binary has %s", strings.Join(a.projectionNames(), ", "))
}

func (a *App) projectionNames() []string {
	names := make([]string, len(a.cfg.Projections))
	for i, p := range a.cfg.Projections {
		names[i] = p.Name()
	}
	return names
}
