package kafka_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/kafka"
)

// Consume the "payments" topic into the ledger as a member of group
// "ledger"; start as many processes as there are partitions to share.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/postgres")
	if err != nil {
		log.Fatal(err)
	}
	proc, err := projection.New(pool, &projection.Config{Schema: "inorder"}, ledger.New(nil))
	if err != nil {
		log.Fatal(err)
	}
	src, err := kafka.New(&kafka.Config{
		Brokers:   []string{"127.0.0.1:9092"},
		Topics:    []string{"payments"},
		Group:     "ledger",
		Processor: proc,
		// The aggregate id is the record key; read the version from a
		// field of the JSON value instead of the Inorder-Version header.
		Mapping: kafka.Mapping{Version: "field:version"},
	})
	if err != nil {
		log.Fatal(err)
	}
	// Run drains and returns nil once ctx is cancelled.
	if err := src.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
