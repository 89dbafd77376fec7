package projection_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/projection/projectiontest"
)

// Deliveries arrive out of order and duplicated; the read model ends up as if
// the stream had been applied in order, once.
func Example() {
	ctx := context.Background()
	// A fresh schema for the example (in production: your pool).
	db, cleanup := projectiontest.OpenDB()
	defer cleanup()

	proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema}, ledger.New(nil))
	if err != nil {
		log.Fatal(err)
	}
	if err := proc.Setup(ctx); err != nil { // inorder's migrations, then the ledger's tables
		log.Fatal(err)
	}

	auth, _ := aggregate.New("pay-1", 1, ledger.Authorized, ledger.Data{Payer: "alice", Payee: "shop", Amount: 1000})
	capture, _ := aggregate.New("pay-1", 2, ledger.Captured, ledger.Data{Amount: 600})
	refund, _ := aggregate.New("pay-1", 3, ledger.Refunded, ledger.Data{Amount: 100})

	for _, batch := range [][]aggregate.Event{
		{refund},              // version 3 first: parked
		{capture, refund},     // version 2: still waiting for 1; 3 is a duplicate
		{auth, auth, capture}, // version 1 arrives: 1, 2 and the parked 3 apply
		{refund, auth},        // late redeliveries: duplicates
	} {
		res, err := proc.Process(ctx, projection.Batch{Events: batch})
		if err != nil {
			log.Fatal(err) // nothing acknowledged: the source redelivers
		}
		out := make([]string, len(res))
		for i, r := range res {
			out[i] = fmt.Sprintf("v%d:%s", batch[i].Version, r.Outcome)
		}
		fmt.Println(strings.Join(out, " "))
	}

	model, err := ledger.New(nil).Load(ctx, db.Pool)
	if err != nil {
		log.Fatal(err)
	}
	p := model.Payments["pay-1"]
	fmt.Printf("%s: captured %d, refunded %d, version %d, %d legs\n", p.Status, p.Captured, p.Refunded, p.Version, len(model.Legs))
	fmt.Println("shop:available", model.Balances["shop:available"])
	// Output:
	// v3:parked
	// v2:parked v3:duplicate
	// v1:applied v1:duplicate v2:duplicate
	// v3:duplicate v1:duplicate
	// refunded: captured 600, refunded 100, version 3, 6 legs
	// shop:available 500
}
