package aggregate_test

import (
	"errors"
	"fmt"

	"github.com/inorder/inorder/aggregate"
)

func ExampleEvent_Validate() {
	e := aggregate.Event{Aggregate: "payment-42", Version: 0, Type: "payment.captured", Data: []byte(`{"amount":100}`)}
	err := e.Validate(nil)
	var ve *aggregate.ValidationError
	if errors.As(err, &ve) {
		fmt.Println(ve.Reason(), errors.Is(err, aggregate.ErrBadVersion))
	}
	// Output: bad_version true
}

func ExampleClassify() {
	current := int64(3)
	for _, v := range []int64{2, 4, 5} {
		fmt.Printf("version %d at %d: %s\n", v, current, aggregate.Classify(current, v))
	}
	// Output:
	// version 2 at 3: stale
	// version 4 at 3: next
	// version 5 at 3: future
}

func ExampleEvent_StableID() {
	e, _ := aggregate.New("payment-42", 7, "payment.refunded", map[string]int{"amount": 250})
	fmt.Println(e.StableID())
	// Output: payment-42:7
}
