package projection_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/projection/projectiontest"
)

// stock is a set-based projection over shared rows: every order's event
// moves the stock of a product, and many orders — handled by many workers at
// once — move the same products'. projection.Sums accumulates the batch's
// changes per product and upserts them in product order, so concurrent
// batches cannot deadlock on the rows.
type stock struct{}

type moved struct {
	SKU string `json:"sku"`
	Qty int64  `json:"qty"`
}

func (stock) Name() string { return "stock" }

func (stock) Setup(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS stock (sku text PRIMARY KEY, on_hand bigint NOT NULL, moves bigint NOT NULL)`)
	return err
}

func (stock) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE stock`)
	return err
}

func (stock) ApplyBatch(ctx context.Context, tx *projection.Tx, events []aggregate.Event) error {
	sums := projection.NewSums[string](pgx.Identifier{"stock"}, "sku", "on_hand", "moves")
	for _, e := range events {
		var m moved
		if err := json.Unmarshal(e.Data, &m); err != nil {
			return fmt.Errorf("stock: %s v%d: %w", e.Aggregate, e.Version, err)
		}
		sums.Add(m.SKU, m.Qty, 1)
	}
	sums.Queue(tx) // one upsert, in sku order
	return nil
}

// Apply runs a projection's handler on a transaction of your own, without a
// Processor: to test the handler, or to reuse it in a hand-written consumer.
func ExampleApply() {
	ctx := context.Background()
	db, cleanup := projectiontest.OpenDB()
	defer cleanup()

	var events []aggregate.Event
	for i, m := range []moved{{"apple", 10}, {"pear", 5}, {"apple", -3}, {"pear", -1}, {"apple", -2}} {
		e, err := aggregate.New(fmt.Sprintf("order-%d", i%2), int64(i/2+1), "stock.moved", m)
		if err != nil {
			log.Fatal(err)
		}
		events = append(events, e)
	}
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if err := (stock{}).Setup(ctx, tx); err != nil {
			return err
		}
		return projection.Apply(ctx, tx, stock{}, events...)
	})
	if err != nil {
		log.Fatal(err)
	}
	rows, err := db.Pool.Query(ctx, `SELECT sku, on_hand, moves FROM stock ORDER BY sku`)
	if err != nil {
		log.Fatal(err)
	}
	for rows.Next() {
		var sku string
		var onHand, moves int64
		if err := rows.Scan(&sku, &onHand, &moves); err != nil {
			log.Fatal(err)
		}
		fmt.Println(sku, onHand, moves)
	}
	if err := rows.Err(); err != nil {
		log.Fatal(err)
	}
	// Output:
	// apple 5 3
	// pear 4 2
}
