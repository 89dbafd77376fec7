package effects

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/inorder/inorder/migrations"
)

// RiverMigrateOptions configures MigrateRiver. The zero value is valid.
type RiverMigrateOptions struct {
	// Schema receives River's tables; it is created if missing. Default
	// migrations.DefaultSchema (next to inorder's tables).
	Schema string
	// DryRun reports the versions that would be applied without changing
	// anything.
	DryRun bool
	// Logger receives River's migration logs. Default: discarded.
	Logger *slog.Logger
}

// schemaRE is River's rule for schema names.
var schemaRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// MigrateRiver applies River's own migrations (River's tables: river_job,
// river_queue, river_leader, …) to a schema, the one a Client's
// Config.RiverSchema names. `inorder migrate` runs it after inorder's
// migrations. Concurrent calls, from any number of processes, are serialised
// by an advisory lock on the schema; the second finds nothing to do. It
// returns the versions applied (or, in a dry run, that would be).
func MigrateRiver(ctx context.Context, pool *pgxpool.Pool, opts *RiverMigrateOptions) ([]int, error) {
	if opts == nil {
		opts = &RiverMigrateOptions{}
	}
	schema := opts.Schema
	if schema == "" {
		schema = migrations.DefaultSchema
	}
	if !schemaRE.MatchString(schema) {
		return nil, fmt.Errorf("effects: River schema %q: River accepts letters, digits and underscores only", schema)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("effects: migrate River: %w", err)
	}
	defer conn.Release()
	h := sha256.Sum256([]byte("inorder.river-migrate\x00" + schema))
	lock := int64(binary.BigEndian.Uint64(h[:8]))
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lock); err != nil {
		return nil, fmt.Errorf("effects: migrate River: lock: %w", err)
	}
	defer func() {
		// A failed unlock leaves the lock to the connection: destroy it.
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lock); err != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	if !opts.DryRun {
		if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
			return nil, fmt.Errorf("effects: migrate River: create schema %s: %w", schema, err)
		}
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("effects: migrate River: %w", err)
	}
	res, err := m.Migrate(ctx, rivermigrate.DirectionUp, &rivermigrate.MigrateOpts{DryRun: opts.DryRun})
	if err != nil {
		return nil, fmt.Errorf("effects: migrate River in schema %s: %w", schema, err)
	}
	versions := make([]int, len(res.Versions))
	for i, v := range res.Versions {
		versions[i] = v.Version
	}
	return versions, nil
}

// ErrRiverNotMigrated is returned, wrapped, by CheckRiver when River's
// migrations are missing from a schema.
var ErrRiverNotMigrated = errors.New("effects: River's tables are missing or not fully migrated")

// RiverMigration is one of River's migrations and whether a schema has it.
type RiverMigration struct {
	// Version and Name are River's numbering and naming of the migration.
	Version int    `json:"version"`
	Name    string `json:"name"`
	// Applied is true when the schema has it.
	Applied bool `json:"applied"`
}

// RiverMigrations lists River's migrations (those of the River release this
// binary carries) and whether schema has each. Read-only.
func RiverMigrations(ctx context.Context, pool *pgxpool.Pool, schema string) ([]RiverMigration, error) {
	m, err := riverMigrator(pool, schema)
	if err != nil {
		return nil, err
	}
	have, err := m.ExistingVersions(ctx)
	if err != nil {
		return nil, fmt.Errorf("effects: River migrations in schema %s: %w", schema, err)
	}
	applied := map[int]bool{}
	for _, v := range have {
		applied[v.Version] = true
	}
	all := m.AllVersions()
	out := make([]RiverMigration, len(all))
	for i, v := range all {
		out[i] = RiverMigration{Version: v.Version, Name: v.Name, Applied: applied[v.Version]}
	}
	return out, nil
}

// CheckRiver returns an error wrapping ErrRiverNotMigrated unless schema has
// every River migration this binary knows: a worker must not start on
// River's tables half made. Read-only.
func CheckRiver(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	ms, err := RiverMigrations(ctx, pool, schema)
	if err != nil {
		return err
	}
	pending := 0
	for _, m := range ms {
		if !m.Applied {
			pending++
		}
	}
	if pending > 0 {
		return fmt.Errorf("%w: %d of %d pending in schema %s", ErrRiverNotMigrated, pending, len(ms), schema)
	}
	return nil
}

func riverMigrator(pool *pgxpool.Pool, schema string) (*rivermigrate.Migrator[pgx.Tx], error) {
	if schema == "" {
		schema = migrations.DefaultSchema
	}
	if !schemaRE.MatchString(schema) {
		return nil, fmt.Errorf("effects: River schema %q: River accepts letters, digits and underscores only", schema)
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("effects: River migrator: %w", err)
	}
	return m, nil
}
