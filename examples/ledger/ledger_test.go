package ledger_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
)

func event(t *testing.T, v int64, typ string, d ledger.Data) aggregate.Event {
	t.Helper()
	e, err := aggregate.New("pay-1", v, typ, d)
	require.NoError(t, err)
	return e
}

func TestStepRules(t *testing.T) {
	t.Parallel()
	stream := []aggregate.Event{
		event(t, 1, ledger.Authorized, ledger.Data{Payer: "c", Payee: "m", Amount: 1000}),
		event(t, 2, ledger.Captured, ledger.Data{Amount: 700}),
		event(t, 3, ledger.Captured, ledger.Data{Amount: 700}),  // only 300 left
		event(t, 4, ledger.Refunded, ledger.Data{Amount: 2000}), // at most the 1000 captured
		event(t, 5, ledger.Voided, ledger.Data{}),               // nothing left on hold
	}
	m, err := ledger.Fold(stream)
	require.NoError(t, err)
	p := m.Payments["pay-1"]
	require.Equal(t, ledger.Payment{ID: "pay-1", Payer: "c", Payee: "m", Status: "voided", Authorized: 1000, Captured: 1000, Refunded: 1000, Version: 5}, p)
	var sum int64
	for _, l := range m.Legs {
		sum += l.Amount
	}
	require.Zero(t, sum, "double entry: legs balance")
	require.Len(t, m.Legs, 8, "two legs each for authorize, two captures and the refund")
	// -1000+1000 on c:available, +1000-1000 on c:held, +700+300-1000 on
	// m:available: everything nets out, and zero balances are dropped.
	require.Empty(t, m.Balances)

	m, err = ledger.Fold(stream[:3])
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"c:available": -1000, "m:available": 1000}, m.Balances)
}

func TestOrderMatters(t *testing.T) {
	t.Parallel()
	// Applying a refund before the capture it refunds gives a different
	// ledger than the stream order: the fold detects wrong orders.
	auth := event(t, 1, ledger.Authorized, ledger.Data{Payer: "c", Payee: "m", Amount: 1000})
	capture := event(t, 2, ledger.Captured, ledger.Data{Amount: 500})
	refund := event(t, 3, ledger.Refunded, ledger.Data{Amount: 500})
	p1, _, err := ledger.Step(nil, auth)
	require.NoError(t, err)
	p2, _, err := ledger.Step(p1, capture)
	require.NoError(t, err)
	p3, legs, err := ledger.Step(p2, refund)
	require.NoError(t, err)
	require.Len(t, legs, 2)
	require.EqualValues(t, 500, p3.Refunded)

	swappedRefund := refund
	swappedRefund.Version = 2
	q2, legs, err := ledger.Step(p1, swappedRefund)
	require.NoError(t, err)
	require.Empty(t, legs, "nothing captured yet, nothing to refund")
	require.Zero(t, q2.Refunded)
}

func TestStepErrors(t *testing.T) {
	t.Parallel()
	_, _, err := ledger.Step(nil, event(t, 1, ledger.Captured, ledger.Data{Amount: 1}))
	require.Error(t, err)
	p, _, err := ledger.Step(nil, event(t, 1, ledger.Authorized, ledger.Data{Payer: "c", Payee: "m", Amount: 10}))
	require.NoError(t, err)
	_, _, err = ledger.Step(p, event(t, 3, ledger.Approved, ledger.Data{}))
	require.Error(t, err, "a gap is an error")
	_, _, err = ledger.Step(p, event(t, 2, "payment.teleported", ledger.Data{}))
	require.ErrorIs(t, err, aggregate.ErrUnknownType)
	bad := event(t, 2, ledger.Captured, ledger.Data{})
	bad.Data = []byte(`[`)
	_, _, err = ledger.Step(p, bad)
	require.Error(t, err)
}

func TestGenerate(t *testing.T) {
	t.Parallel()
	a := ledger.Generate(rand.New(rand.NewPCG(1, 1)), 50, 7)
	b := ledger.Generate(rand.New(rand.NewPCG(1, 1)), 50, 7)
	require.Equal(t, a, b, "deterministic for a seed")
	require.Len(t, a, 350)
	next := map[string]int64{}
	for _, e := range a {
		require.NoError(t, e.Validate(&aggregate.Limits{Types: ledger.Types}))
		require.Equal(t, next[e.Aggregate]+1, e.Version, "stream order within each payment")
		next[e.Aggregate] = e.Version
	}
	require.Len(t, next, 50)
	_, err := ledger.Fold(a)
	require.NoError(t, err)
}
