package clikit

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/migrations"
)

// SchemaError says why inorder's schema is not ready for the workers and
// the operator commands: missing, not (fully) migrated, or migrated by a
// newer release.
type SchemaError struct {
	Schema string
	// Missing is set when the schema does not exist.
	Missing bool
	// Pending counts the migrations not applied.
	Pending int
	// Unknown is an applied version this binary does not know (0 if none);
	// the error then wraps migrations.ErrUnknownVersion.
	Unknown int
}

func (e *SchemaError) Error() string {
	switch {
	case e.Missing:
		return fmt.Sprintf("schema %q does not exist", e.Schema)
	case e.Unknown != 0:
		return fmt.Sprintf("schema %q has migration %d, which this binary does not know (a newer release migrated it)", e.Schema, e.Unknown)
	default:
		return fmt.Sprintf("schema %q has %d pending migrations", e.Schema, e.Pending)
	}
}

// Unwrap returns migrations.ErrUnknownVersion for an unknown version.
func (e *SchemaError) Unwrap() error {
	if e.Unknown != 0 {
		return migrations.ErrUnknownVersion
	}
	return nil
}

// CheckSchema returns nil when schema exists and has every migration of
// this binary applied (and no newer release's migration other than those
// recorded online), a *SchemaError when it does not, and another error
// when the database cannot tell.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := migrations.New(pool, &migrations.Options{Schema: schema, Logger: logger})
	if err != nil {
		return err
	}
	st, err := m.Status(ctx)
	if err != nil {
		return err
	}
	e := &SchemaError{Schema: schema}
	applied := 0
	for _, s := range st {
		switch {
		case s.Unknown && s.Online:
			// A newer release's online migration: this binary works
			// beside it (a rolling upgrade).
		case s.Unknown:
			e.Unknown = s.Version
			return e
		case s.Applied:
			applied++
		default:
			e.Pending++
		}
	}
	if applied == 0 {
		// Never migrated: say whether the schema is there at all.
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
			return fmt.Errorf("look up schema %q: %w", schema, err)
		}
		e.Missing = !exists
	}
	if e.Pending == 0 {
		return nil
	}
	return e
}
