package clikit

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/migrations"
)

// DBOptions are the flags of commands that use PostgreSQL.
type DBOptions struct {
	URL    string
	Schema string
	// RiverSchema is where River's tables are (package effects); empty
	// means Schema. Use River() to read it.
	RiverSchema string
}

// BindDB defines --database-url, --schema and --river-schema on fs.
func BindDB(fs *pflag.FlagSet, o *DBOptions) {
	fs.StringVar(&o.URL, "database-url", "", "PostgreSQL connection `URL` (postgres://user:pass@host:5432/db?sslmode=disable); the projections' read-model tables go to its search_path")
	fs.StringVar(&o.Schema, "schema", migrations.DefaultSchema, "`schema` of inorder's own tables (versions, parked, quarantine, …)")
	fs.StringVar(&o.RiverSchema, "river-schema", "", "`schema` of River's tables, the job queue of effects (default: --schema)")
}

// River returns the schema of River's tables: RiverSchema, else Schema.
func (o *DBOptions) River() string {
	if o.RiverSchema != "" {
		return o.RiverSchema
	}
	return o.Schema
}

// Validate checks the flags.
func (o *DBOptions) Validate() error {
	if o.URL == "" {
		return Usagef("no database: set --database-url or $%s", EnvDatabaseURL)
	}
	if _, err := pgxpool.ParseConfig(o.URL); err != nil {
		return Usagef("invalid --database-url: %v", Redact(err))
	}
	if o.RiverSchema != "" && !riverSchemaRE.MatchString(o.RiverSchema) {
		return Usagef("invalid --river-schema %q: River accepts letters, digits and underscores only", o.RiverSchema)
	}
	return ValidSchema(o.Schema)
}

// riverSchemaRE is River's rule for schema names.
var riverSchemaRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// ValidSchema checks a --schema value.
func ValidSchema(s string) error {
	if s == "" || len(s) > 63 || strings.ContainsRune(s, 0) {
		return Usagef("invalid --schema %q", s)
	}
	return nil
}

// Redact hides the error's text when it may contain a password (pgx
// quotes the URL in some parse errors).
func Redact(err error) string {
	s := err.Error()
	if strings.Contains(s, "@") {
		return "cannot parse the URL"
	}
	return s
}

// Connect opens a pool on o.URL and pings it. maxConns, if positive, sizes
// it.
func Connect(ctx context.Context, o *DBOptions, maxConns int32, logger *slog.Logger) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(o.URL)
	if err != nil {
		return nil, fmt.Errorf("database: %s", Redact(err))
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		// Not migrations.LegacyApplicationName alone: a migrator counts
		// sessions of that name as an older release's workers.
		cfg.ConnConfig.RuntimeParams["application_name"] = fmt.Sprintf("inorder pid %d", os.Getpid())
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	logger.Debug("connected to PostgreSQL", "host", cfg.ConnConfig.Host, "port", cfg.ConnConfig.Port, "database", cfg.ConnConfig.Database)
	return pool, nil
}
