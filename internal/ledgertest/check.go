package ledgertest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
)

// RequireFold requires that the read model is the in-order fold of events.
func (b *Bundle) RequireFold(tb testing.TB, events []aggregate.Event) {
	tb.Helper()
	want, err := ledger.Fold(events)
	require.NoError(tb, err)
	got, err := b.Ledger.Load(context.Background(), b.DB.Pool)
	require.NoError(tb, err)
	require.Equal(tb, want, got)
}

// AppliedVersions is the sum of the payments' versions: the events the
// ledger applied.
func (b *Bundle) AppliedVersions(tb testing.TB) int {
	tb.Helper()
	var n int
	require.NoError(tb, b.DB.Pool.QueryRow(context.Background(), `SELECT coalesce(sum(version), 0) FROM ledger_payments`).Scan(&n))
	return n
}

// RequireSettled requires that the read model is the in-order fold of
// events and that the processor's status is clean: every version applied,
// nothing parked, quarantined, in conflict or rejected.
func (b *Bundle) RequireSettled(tb testing.TB, events []aggregate.Event) {
	tb.Helper()
	b.RequireFold(tb, events)
	st, err := b.Proc.Status(context.Background(), nil)
	require.NoError(tb, err)
	for _, p := range st.Projections {
		require.Zero(tb, p.Parked, "nothing left parked")
		require.Zero(tb, p.Quarantined)
		require.Zero(tb, p.Conflicts)
		require.EqualValues(tb, len(events), p.Events, "every version applied once")
	}
	require.Empty(tb, st.Attention.Rejected)
}
