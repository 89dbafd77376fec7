package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	"sort"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/effects"
)

// SettledWebhook is the effect kind of the "payment settled" webhook: one
// per capture that moves money, recorded by the projection when
// Options.Effects is set, sent by a Webhook.
const SettledWebhook = "ledger.payment-settled.webhook"

// Settled is the payload of the "payment settled" webhook.
type Settled struct {
	Payment string `json:"payment"`
	Payer   string `json:"payer"`
	Payee   string `json:"payee"`
	// Amount is what this capture moved; Captured the payment's total.
	Amount   int64 `json:"amount"`
	Captured int64 `json:"captured"`
	// Version is the payment's version that settled it.
	Version int64 `json:"version"`
}

// settles reports whether event e, taking a payment from prev to next, is a
// settlement: a capture that moved money.
func settles(prev, next *Payment, e aggregate.Event) (Settled, bool) {
	if e.Type != Captured || prev == nil || next.Captured <= prev.Captured {
		return Settled{}, false
	}
	return Settled{Payment: next.ID, Payer: next.Payer, Payee: next.Payee,
		Amount: next.Captured - prev.Captured, Captured: next.Captured, Version: e.Version}, true
}

// Settlements returns the settlements of a stream (in any order, as Fold),
// by the key of their webhook intent as the projection named projection
// records it: what a receiver must have been notified of, once each.
func Settlements(events []aggregate.Event, projection string) (map[string]Settled, error) {
	byAgg := map[string][]aggregate.Event{}
	for _, e := range events {
		byAgg[e.Aggregate] = append(byAgg[e.Aggregate], e)
	}
	out := map[string]Settled{}
	for _, es := range byAgg {
		sort.Slice(es, func(i, j int) bool { return es[i].Version < es[j].Version })
		var p *Payment
		for _, e := range es {
			next, _, err := Step(p, e)
			if err != nil {
				return nil, err
			}
			if s, ok := settles(p, next, e); ok {
				out[effects.Intent{Kind: SettledWebhook, Event: e}.Key(projection)] = s
			}
			p = next
		}
	}
	return out, nil
}

// Webhook is the effects.Handler of SettledWebhook: it POSTs the Settled
// payload as JSON to URL with the intent's key in the Idempotency-Key
// header, so a receiver that remembers keys applies each settlement once
// however often it is sent. 2xx is done; 4xx (but 408 and 429) is
// permanent; anything else, a timeout included, is retried with the same
// key.
//
// Every POST is traced with otelhttp: a client span, child of the span the
// effects client gives the attempt (effects.Config.TracerProvider), and its
// W3C traceparent (and baggage) in the request's headers, so the receiver's
// trace continues the effect's.
type Webhook struct {
	// URL receives the POSTs.
	URL string
	// Client sends them. Default: a client whose transport is
	// http.DefaultTransport instrumented with otelhttp (see above); a
	// Client of yours is used as it is.
	Client *http.Client

	once   sync.Once
	traced *http.Client
}

// client returns the Client, or the default one: the spans and the
// traceparent of otelhttp, with the tracer provider of the caller's span
// (none when the attempt is not traced) and the W3C propagators, not the
// process's global ones.
func (w *Webhook) client() *http.Client {
	if w.Client != nil {
		return w.Client
	}
	w.once.Do(func() {
		w.traced = &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport,
			otelhttp.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
			otelhttp.WithSpanNameFormatter(func(string, *http.Request) string { return "POST " + SettledWebhook }))}
	})
	return w.traced
}

// Kind implements effects.Handler.
func (w *Webhook) Kind() string { return SettledWebhook }

// Perform implements effects.Handler.
func (w *Webhook) Perform(ctx context.Context, e *effects.Effect) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(e.Args))
	if err != nil {
		return effects.Permanent(fmt.Errorf("ledger webhook: %w", err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", e.Key)
	resp, err := w.client().Do(req)
	if err != nil {
		return fmt.Errorf("ledger webhook: %w", err)
	}
	defer resp.Body.Close()
	switch s := resp.StatusCode; {
	case s < 300:
		return nil
	case s < 500 && s != http.StatusRequestTimeout && s != http.StatusTooManyRequests:
		return effects.Permanent(fmt.Errorf("ledger webhook: %s answered %s", w.URL, resp.Status))
	default:
		return fmt.Errorf("ledger webhook: %s answered %s", w.URL, resp.Status)
	}
}

// Decode decodes a webhook's body.
func Decode(body []byte) (Settled, error) {
	var s Settled
	if err := json.Unmarshal(body, &s); err != nil {
		return Settled{}, fmt.Errorf("ledger webhook: %w", err)
	}
	return s, nil
}

var _ effects.Handler = (*Webhook)(nil)
