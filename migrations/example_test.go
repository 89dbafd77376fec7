package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/migrations"
)

// Migrate a database to the schema this binary expects, as inorder migrate
// does (and projection.Processor.Setup, before the projections' setup).
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	m, err := migrations.New(pool, &migrations.Options{Logger: slog.Default()})
	if err != nil {
		log.Fatal(err)
	}
	res, err := m.Migrate(ctx)
	if errors.Is(err, migrations.ErrUnknownVersion) {
		log.Fatal("the database was migrated by a newer release: ", err)
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("applied %v to schema %s\n", res.Versions(), m.Schema())
}

// Show what Migrate would do, and the state of every migration, without
// changing anything.
func ExampleMigrator_Status() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	m, err := migrations.New(pool, &migrations.Options{Schema: "inorder", DryRun: true})
	if err != nil {
		log.Fatal(err)
	}
	res, err := m.Migrate(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pending:", res.Versions())

	statuses, err := m.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range statuses {
		fmt.Printf("%03d_%s applied=%t %s\n", s.Version, s.Name, s.Applied, s.AppliedAt)
	}
}
