package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
)

// LedgerWorkload returns the workload of the shipped binary's demo: payments
// (ledger.Generate) for the ledger projection p, verified against
// ledger.Fold.
func LedgerWorkload(p *ledger.Projection) *Workload {
	return &Workload{
		Projection: p.Name(),
		Noun:       "payments",
		Generate: func(rng *rand.Rand, aggregates, versions int) []aggregate.Event {
			return ledger.Generate(rng, aggregates, versions)
		},
		Verify: func(ctx context.Context, q projection.Querier, events []aggregate.Event) error {
			want, err := ledger.Fold(events)
			if err != nil {
				return fmt.Errorf("fold the workload: %w", err)
			}
			got, err := p.Load(ctx, q)
			if err != nil {
				return err
			}
			return compareLedger(want, got)
		},
		Effects: &Effects{
			What: "payment settlements",
			Handlers: func(url string) []effects.Handler {
				return []effects.Handler{&ledger.Webhook{URL: url}}
			},
			Expected: func(events []aggregate.Event) (map[string]bool, error) {
				settled, err := ledger.Settlements(events, p.Name())
				if err != nil {
					return nil, err
				}
				keys := make(map[string]bool, len(settled))
				for k := range settled {
					keys[k] = true
				}
				return keys, nil
			},
		},
		Filter: func(events []aggregate.Event) (string, string) {
			for _, e := range events {
				if e.Type != ledger.Authorized {
					continue
				}
				var d ledger.Data
				if json.Unmarshal(e.Data, &d) == nil && d.Payer != "" {
					return "payer", d.Payer
				}
			}
			return "status", "captured"
		},
	}
}

// compareLedger describes how got differs from want; nil when equal.
func compareLedger(want, got *ledger.Model) error {
	var diffs []string
	ids := make([]string, 0, len(want.Payments))
	for id := range want.Payments {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	wrong := 0
	for _, id := range ids {
		g, ok := got.Payments[id]
		if !ok || g != want.Payments[id] {
			if wrong == 0 {
				diffs = append(diffs, fmt.Sprintf("payment %s: want %+v, got %+v", id, want.Payments[id], g))
			}
			wrong++
		}
	}
	if wrong > 0 {
		diffs = append(diffs, fmt.Sprintf("%d of %d payments differ", wrong, len(want.Payments)))
	}
	if extra := len(got.Payments) - (len(want.Payments) - countMissing(want, got)); extra > 0 {
		diffs = append(diffs, fmt.Sprintf("%d payments not in the workload", extra))
	}
	if !slices.Equal(want.Legs, got.Legs) {
		diffs = append(diffs, fmt.Sprintf("ledger legs differ: want %d, got %d", len(want.Legs), len(got.Legs)))
	}
	if len(want.Balances) != len(got.Balances) {
		diffs = append(diffs, fmt.Sprintf("balances differ: want %d accounts, got %d", len(want.Balances), len(got.Balances)))
	} else {
		for acct, b := range want.Balances {
			if got.Balances[acct] != b {
				diffs = append(diffs, fmt.Sprintf("balance of %s: want %d, got %d", acct, b, got.Balances[acct]))
				break
			}
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: the read model differs from the in-order fold: %v", ErrVerify, diffs)
}

func countMissing(want, got *ledger.Model) int {
	n := 0
	for id := range want.Payments {
		if _, ok := got.Payments[id]; !ok {
			n++
		}
	}
	return n
}
