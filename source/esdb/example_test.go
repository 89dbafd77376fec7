package esdb_test

import (
	"context"
	"log"
	"log/slog"
	"os"
	"os/signal"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
)

// A worker that feeds the ledger projection from the payment streams of
// EventStoreDB ("payment-42" is aggregate "42"). The first interrupt drains;
// a second one aborts.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	proc, err := projection.New(pool, nil, ledger.New(nil))
	if err != nil {
		log.Fatal(err)
	}
	src, err := esdb.New(&esdb.Config{
		URL:       "esdb://localhost:2113?tls=false",
		Processor: proc,
		Name:      "payments",
		Mapping:   esdb.Mapping{StreamPrefix: "payment-"},
		Logger:    slog.Default(),
		// Persistent: &esdb.Persistent{Group: "inorder"}, // for competing consumers
	})
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		<-ctx.Done()
		second := make(chan os.Signal, 1)
		signal.Notify(second, os.Interrupt)
		<-second
		src.Abort()
	}()
	if err := src.Run(ctx); err != nil {
		log.Fatal(err)
	}
	st := src.Stats()
	log.Printf("received %d, acked %d, checkpoint %v", st.Received, st.Acked, st.Checkpoint)
}
