package projection_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/projection/projectiontest"
)

// orders is an inline projection: its read model has one row per order,
// written by every event of the order, and that row carries the order's
// version — and with it the gate's state, so that the gate writes no row of
// its own for an order that continues where its row stands.
type orders struct{}

// ordersRow says what an order's row is: its customer (written once), its
// item count (adding up) and its status. The key, version and log columns
// are the gate's, and so are the compare-and-set and the log that Queue adds
// to the upsert.
var ordersRow = projection.InlineUpsert{
	Table: projection.InlineTable{Table: pgx.Identifier{"orders"}, Key: "id", Version: "version", Log: "inorder_log"},
	Alias: "o",
	Columns: []projection.InlineColumn{
		{Name: "customer", Type: "text", InsertOnly: true},
		{Name: "items", Type: "bigint", Update: "o.items + EXCLUDED.items"},
		{Name: "status", Type: "text", Update: "coalesce(nullif(EXCLUDED.status, ''), o.status)"}, // '': unchanged
	},
	Set: []string{"updated_at = now()"},
}

type orderEvent struct {
	Customer string `json:"customer,omitempty"`
	Qty      int64  `json:"qty,omitempty"`
}

func (orders) Name() string { return "orders" }

func (orders) InlineTable() (projection.InlineTable, bool) { return ordersRow.Table, true }

func (orders) Setup(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, customer text NOT NULL,
  items bigint NOT NULL, status text NOT NULL, version bigint NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(), inorder_log bytea NOT NULL DEFAULT '')`)
	return err
}

func (orders) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE orders`)
	return err
}

// ApplyBatch folds each order's events into one row — the events come by
// order, and by version within an order — and upserts the rows with one
// statement.
func (orders) ApplyBatch(ctx context.Context, tx *projection.Tx, events []aggregate.Event) error {
	var ids, customers, statuses []string
	var versions, items []int64
	for i, e := range events {
		if i == 0 || events[i-1].Aggregate != e.Aggregate {
			ids, versions = append(ids, e.Aggregate), append(versions, 0)
			customers, items, statuses = append(customers, ""), append(items, 0), append(statuses, "")
		}
		j := len(ids) - 1
		var d orderEvent
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return fmt.Errorf("orders: %s v%d: %w", e.Aggregate, e.Version, err)
		}
		versions[j] = e.Version
		switch e.Type {
		case "order.placed":
			customers[j], statuses[j] = d.Customer, "open"
		case "order.item":
			items[j] += d.Qty
		case "order.shipped":
			statuses[j] = "shipped"
		}
	}
	return ordersRow.Queue(tx, ids, versions, customers, items, statuses)
}

// InlineUpsert writes an inline projection's upsert from what its rows
// are; the projection's SQL says nothing of the gate's version and log.
func ExampleInlineUpsert() {
	ctx := context.Background()
	db, cleanup := projectiontest.OpenDB()
	defer cleanup()

	proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema}, orders{})
	if err != nil {
		log.Fatal(err)
	}
	if err := proc.Setup(ctx); err != nil {
		log.Fatal(err)
	}
	placed, _ := aggregate.New("order-1", 1, "order.placed", orderEvent{Customer: "alice"})
	two, _ := aggregate.New("order-1", 2, "order.item", orderEvent{Qty: 2})
	one, _ := aggregate.New("order-1", 3, "order.item", orderEvent{Qty: 1})
	shipped, _ := aggregate.New("order-1", 4, "order.shipped", orderEvent{})

	for _, batch := range [][]aggregate.Event{
		{one, two},         // versions 3 and 2 first: parked
		{placed, two},      // version 1: 1, and the parked 2 and 3, apply
		{shipped, shipped}, // version 4, and a copy
		{one, placed},      // late redeliveries
	} {
		res, err := proc.Process(ctx, projection.Batch{Events: batch})
		if err != nil {
			log.Fatal(err)
		}
		out := make([]string, len(res))
		for i, r := range res {
			out[i] = fmt.Sprintf("v%d:%s", batch[i].Version, r.Outcome)
		}
		fmt.Println(strings.Join(out, " "))
	}

	var customer, status string
	var items, version int64
	if err := db.Pool.QueryRow(ctx, `SELECT customer, items, status, version FROM orders WHERE id = 'order-1'`).
		Scan(&customer, &items, &status, &version); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %d items, %s, version %d\n", customer, items, status, version)
	// Output:
	// v3:parked v2:parked
	// v1:applied v2:duplicate
	// v4:applied v4:duplicate
	// v3:duplicate v1:duplicate
	// alice: 3 items, shipped, version 4
}
