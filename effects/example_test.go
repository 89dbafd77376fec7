package effects_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/projection/projectiontest"
)

// shipped is a projection that, for every order.shipped event, asks for an
// e-mail to the customer: an intent recorded with the event's version.
type shipped struct{ fx *effects.Client }

func (s shipped) Name() string { return "orders" }

func (s shipped) Apply(ctx context.Context, tx *projection.Tx, e aggregate.Event) error {
	if e.Type != "order.shipped" {
		return nil
	}
	_, err := s.fx.Record(ctx, tx, effects.Intent{Kind: "email.shipped", Event: e, Args: map[string]string{"order": e.Aggregate}})
	return err
}

// Example records an intent per shipped order and performs it against an
// e-mail service that dedupes by Idempotency-Key. The shipment is delivered
// three times, twice at once: one intent, one e-mail.
func Example() {
	db, cleanup := projectiontest.OpenDB() // a fresh schema for the example (yours: your pool)
	defer cleanup()
	ctx := context.Background()
	if _, err := effects.MigrateRiver(ctx, db.Pool, &effects.RiverMigrateOptions{Schema: db.Schema}); err != nil {
		panic(err)
	}

	var mu sync.Mutex
	sent := map[string]int{}
	mail := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		sent[r.Header.Get("Idempotency-Key")]++
	}))
	defer mail.Close()

	done := make(chan string, 1)
	fx, err := effects.New(db.Pool, &effects.Config{
		Schema:    db.Schema,
		OnAttempt: func(a effects.Attempt) { done <- string(a.State) },
	}, effects.HandlerFunc("email.shipped", func(ctx context.Context, e *effects.Effect) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, mail.URL, strings.NewReader(string(e.Args)))
		if err != nil {
			return effects.Permanent(err)
		}
		req.Header.Set("Idempotency-Key", e.Key) // derived from the fact
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err // uncertain: retried with the same key
		}
		resp.Body.Close()
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return effects.Permanent(fmt.Errorf("mail service: %s", resp.Status))
		}
		if resp.StatusCode >= 500 {
			return fmt.Errorf("mail service: %s", resp.Status)
		}
		return nil
	}))
	if err != nil {
		panic(err)
	}
	proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema}, shipped{fx})
	if err != nil {
		panic(err)
	}
	if err := proc.Setup(ctx); err != nil { // inorder's migrations (River's are MigrateRiver's)
		panic(err)
	}

	e, _ := aggregate.New("order-7", 1, "order.shipped", map[string]string{"carrier": "post"})
	var wg sync.WaitGroup
	for range 2 { // two copies at once
		wg.Go(func() {
			if _, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{e}}); err != nil {
				panic(err)
			}
		})
	}
	wg.Wait()
	if _, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{e}}); err != nil { // and a late one
		panic(err)
	}

	if err := fx.Start(ctx); err != nil {
		panic(err)
	}
	defer fx.Stop(ctx)
	select {
	case state := <-done:
		fmt.Println("intent:", state)
	case <-time.After(time.Minute):
		panic("timed out")
	}
	key := effects.Intent{Kind: "email.shipped", Event: e}.Key("orders")
	mu.Lock()
	fmt.Println("e-mails sent:", sent[key])
	mu.Unlock()
	intents, _ := fx.List(ctx, projection.ListOptions{})
	fmt.Println("intents recorded:", len(intents))
	// Output:
	// intent: done
	// e-mails sent: 1
	// intents recorded: 1
}
