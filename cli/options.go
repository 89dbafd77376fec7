package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/migrations"
	"github.com/inorder/inorder/projection"
)

// Environment variables that stand in for flags.
const (
	EnvDatabaseURL = "DATABASE_URL"
	EnvESDBURL     = "ESDB_URL"
	EnvSchema      = "INORDER_SCHEMA"
	EnvHTTPAddr    = "INORDER_HTTP_ADDR"
	EnvHTTPToken   = "INORDER_HTTP_TOKEN"
	EnvLogFormat   = "INORDER_LOG_FORMAT"
	EnvLogLevel    = "INORDER_LOG_LEVEL"
)

// logOptions are the logging flags of every command.
type logOptions struct {
	Format string
	Level  string
	level  slog.Level
}

func bindLog(fs *flagSet, o *logOptions, defLevel string) {
	fs.stringVar(&o.Format, "log-format", EnvLogFormat, "text", "log `format` on stderr: text or json")
	fs.stringVar(&o.Level, "log-level", EnvLogLevel, defLevel, "minimum log `level`: debug, info, warn or error")
}

func (o *logOptions) validate() error {
	switch o.Format {
	case "text", "json":
	default:
		return usageErrorf("--log-format must be text or json, not %q", o.Format)
	}
	if err := o.level.UnmarshalText([]byte(o.Level)); err != nil {
		return usageErrorf("--log-level must be debug, info, warn or error, not %q", o.Level)
	}
	return nil
}

// dbOptions are the flags of commands that use PostgreSQL.
type dbOptions struct {
	URL    string
	Schema string
}

func bindDB(fs *flagSet, o *dbOptions) {
	fs.stringVar(&o.URL, "database-url", EnvDatabaseURL, "", "PostgreSQL connection `URL` (postgres://user:pass@host:5432/db?sslmode=disable); the projections' read-model tables go to its search_path")
	fs.stringVar(&o.Schema, "schema", EnvSchema, migrations.DefaultSchema, "`schema` of inorder's own tables (versions, parked, quarantine, …)")
}

func (o *dbOptions) validate() error {
	if o.URL == "" {
		return usageErrorf("no database: set --database-url or $%s", EnvDatabaseURL)
	}
	if _, err := pgxpool.ParseConfig(o.URL); err != nil {
		return usageErrorf("invalid --database-url: %v", redact(err))
	}
	if o.Schema == "" || len(o.Schema) > 63 || strings.ContainsRune(o.Schema, 0) {
		return usageErrorf("invalid --schema %q", o.Schema)
	}
	return nil
}

// redact hides the error's text when it may contain a password (pgx
// quotes the URL in some parse errors).
func redact(err error) string {
	s := err.Error()
	if strings.Contains(s, "@") {
		return "cannot parse the URL"
	}
	return s
}

// outputOptions are the flags of commands that print records.
type outputOptions struct {
	JSON bool
}

func bindOutput(fs *flagSet, o *outputOptions) {
	fs.BoolVar(&o.JSON, "json", false, "print JSON instead of a table")
}

// connect opens a pool on o.URL. maxConns, if positive, sizes it.
func connect(ctx context.Context, o *dbOptions, maxConns int32, logger *slog.Logger) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(o.URL)
	if err != nil {
		return nil, fmt.Errorf("database: %s", redact(err))
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "inorder"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database: connect to %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	logger.Debug("inorder: connected to PostgreSQL", "host", cfg.ConnConfig.Host, "port", cfg.ConnConfig.Port, "database", cfg.ConnConfig.Database)
	return pool, nil
}

// processor returns a processor of the configured projections on pool.
func (a *app) processor(pool *pgxpool.Pool, schema string, logger *slog.Logger) (*projection.Processor, error) {
	pc := a.cfg.Processor
	pc.Schema = schema
	pc.Logger = logger
	proc, err := projection.New(pool, &pc, a.cfg.Projections...)
	if err != nil {
		return nil, fmt.Errorf("processor: %w", err)
	}
	return proc, nil
}

// pickProjection returns name, or the only projection when name is empty.
func (a *app) pickProjection(name string) (string, error) {
	if name != "" {
		for _, p := range a.cfg.Projections {
			if p.Name() == name {
				return name, nil
			}
		}
		return "", usageErrorf("unknown projection %q (have: %s)", name, strings.Join(a.projectionNames(), ", "))
	}
	if len(a.cfg.Projections) == 1 {
		return a.cfg.Projections[0].Name(), nil
	}
	return "", usageErrorf("--projection is required: this binary has %s", strings.Join(a.projectionNames(), ", "))
}

func (a *app) projectionNames() []string {
	names := make([]string, len(a.cfg.Projections))
	for i, p := range a.cfg.Projections {
		names[i] = p.Name()
	}
	return names
}
