package pgtable_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/pgtable"
)

// An application appends its events to inorder's events table in the
// transaction of its own writes, and a worker feeds a projection from it.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	proc, err := projection.New(pool, &projection.Config{Schema: "inorder"}, ledger.New(nil))
	if err != nil {
		log.Fatal(err)
	}
	if err := proc.Setup(ctx); err != nil { // inorder's tables, the events table among them, and the ledger's
		log.Fatal(err)
	}

	// The writer: the state change and its events commit together.
	w := pgtable.NewWriter("inorder", nil)
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	e, _ := aggregate.New("pay-1", 1, ledger.Authorized, ledger.Data{Amount: 1000, Payer: "alice", Payee: "bob"})
	if err := w.Append(ctx, tx, e); err != nil {
		log.Fatal(err) // a *pgtable.VersionConflictError when another writer took version 1
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}

	// The worker: any number of processes with the same Name share the
	// table's partitions.
	src, err := pgtable.New(&pgtable.Config{Pool: pool, Processor: proc, Name: "payments"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(src.Run(ctx)) // until ctx is cancelled, then it drains
}
