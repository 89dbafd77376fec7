package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/internal/pglocal"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// This file holds the demo's database: PostgreSQL found or started, the
// demo schema recreated and migrated, the processor and the effects on it.

// database connects to (or starts) PostgreSQL and prepares the demo schema.
func (d *demoRun) database(ctx context.Context) error {
	base := d.o.DatabaseURL
	if base == "" {
		d.con.Printf([]any{"dir", d.o.DataDir}, "starting a private PostgreSQL cluster in %s ...", d.o.DataDir)
		cl, err := pglocal.Start(ctx, pglocal.Options{Dir: d.o.DataDir, Logger: d.logger})
		if err != nil {
			return fmt.Errorf("demo: PostgreSQL: %w (set --database-url or $%s to use a running server)", err, clikit.EnvDatabaseURL)
		}
		if !d.o.KeepPostgres {
			d.cleanup = append(d.cleanup, func() {
				sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				if err := cl.Stop(sctx); err != nil {
					d.logger.Warn("stop PostgreSQL", "error", err)
				}
			})
		}
		base = cl.URL()
	}
	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		return fmt.Errorf("demo: database URL: %s", clikit.Redact(err))
	}
	// Everything of the demo — inorder's tables and the read model — lives
	// in the demo schema: set it as search_path on every connection, after
	// whatever the URL set.
	setPath := "SET search_path = " + pgx.Identifier{d.o.Schema}.Sanitize()
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, setPath)
		return err
	}
	cfg.MaxConns = int32(max(8, 2*d.o.Consumers+4))
	if d.o.demo.Effects != nil {
		cfg.MaxConns += 8 // River and the effect attempts
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "inorder-demo"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("demo: database: %w", err)
	}
	d.pool = pool
	d.cleanup = append(d.cleanup, pool.Close)
	if err := d.resetSchema(ctx); err != nil {
		return err
	}
	var closeMetrics func()
	dbo := &clikit.DBOptions{URL: base, Schema: d.o.Schema}
	if d.proc, d.metrics, closeMetrics, err = clikit.InstrumentedProcessor(ctx, pool, dbo, d.a.ProcessorConfig(), d.a.Projections(), clikit.ReadBuild(""), true, d.logger); err != nil {
		return err
	}
	d.cleanup = append(d.cleanup, closeMetrics)
	if err := d.proc.Setup(ctx); err != nil { // inorder's migrations, then the read model
		return fmt.Errorf("demo: migrate and create the read model: %w", err)
	}
	if err := d.startEffects(ctx); err != nil {
		return err
	}
	d.dbURL = base
	d.con.Printf([]any{"schema", d.o.Schema}, "schema %s recreated and migrated", d.o.Schema)
	return nil
}

// resetSchema drops and recreates the demo schema, refusing to drop a
// schema with tables that the demo did not create.
func (d *demoRun) resetSchema(ctx context.Context) error {
	var comment *string
	var tables int64
	err := d.pool.QueryRow(ctx, `SELECT obj_description(n.oid, 'pg_namespace'),
  (SELECT count(*) FROM pg_class c WHERE c.relnamespace = n.oid)
FROM pg_namespace n WHERE n.nspname = $1`, d.o.Schema).Scan(&comment, &tables)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("demo: inspect schema %s: %w", d.o.Schema, err)
	case tables > 0 && (comment == nil || *comment != demoSchemaComment):
		return fmt.Errorf("demo: schema %s holds %d tables and was not created by the demo; refusing to drop it (choose another --schema)", d.o.Schema, tables)
	}
	ident := pgx.Identifier{d.o.Schema}.Sanitize()
	b := &pgx.Batch{}
	b.Queue(`DROP SCHEMA IF EXISTS ` + ident + ` CASCADE`)
	b.Queue(`CREATE SCHEMA ` + ident)
	b.Queue(`COMMENT ON SCHEMA ` + ident + ` IS '` + demoSchemaComment + `'`)
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
	if err != nil {
		return fmt.Errorf("demo: recreate schema %s: %w", d.o.Schema, err)
	}
	return nil
}
