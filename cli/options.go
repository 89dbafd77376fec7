package cli

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/projection"
)

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
