package ledgertest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
)

// RequireFold requires that the read model is the in-order fold of events.
func (b *Bundle) RequireFold(tb testing.TB, events []aggregate.Event) {
	tb.Helper()
	RequireFoldOn(tb, b.DB, b.Ledger, events)
}

// RequireFoldOn requires that the read model of l on db's schema is the
// in-order fold of events.
func RequireFoldOn(tb testing.TB, db *pgtest.DB, l *ledger.Projection, events []aggregate.Event) {
	tb.Helper()
	want, err := ledger.Fold(events)
	require.NoError(tb, err)
	got, err := l.Load(context.Background(), db.Pool)
	require.NoError(tb, err)
	require.Equal(tb, want, got)
}

// LoadIn loads the read model of l from schema, put first on the
// search_path in a transaction of db's pool ("" for db's own schema, where
// a projection's first generation lives).
func LoadIn(tb testing.TB, db *pgtest.DB, l *ledger.Projection, schema string) *ledger.Model {
	tb.Helper()
	var m *ledger.Model
	require.NoError(tb, pgx.BeginFunc(tb.Context(), db.Pool, func(tx pgx.Tx) error {
		if schema != "" {
			if _, err := tx.Exec(tb.Context(), `SET LOCAL search_path = `+pgx.Identifier{schema}.Sanitize()); err != nil {
				return err
			}
		}
		var err error
		m, err = l.Load(tb.Context(), tx)
		return err
	}))
	return m
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
