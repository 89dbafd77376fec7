package ledger_test

import (
	"fmt"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
)

// Fold is the in-order fold the projection's read model must equal, whatever
// the delivery order: here a capture of 1500 against an authorisation of 1000
// takes only 1000, and a void afterwards has nothing left to release.
func ExampleFold() {
	auth, _ := aggregate.New("pay-7", 1, ledger.Authorized, ledger.Data{Payer: "bob", Payee: "shop", Amount: 1000})
	capture, _ := aggregate.New("pay-7", 2, ledger.Captured, ledger.Data{Amount: 1500})
	void, _ := aggregate.New("pay-7", 3, ledger.Voided, ledger.Data{})

	m, err := ledger.Fold([]aggregate.Event{void, capture, auth}) // any order: Fold sorts by version
	if err != nil {
		panic(err)
	}
	p := m.Payments["pay-7"]
	fmt.Println(p.Status, p.Captured, len(m.Legs))
	fmt.Println(m.Balances)
	// Output:
	// voided 1000 4
	// map[bob:available:-1000 shop:available:1000]
}
