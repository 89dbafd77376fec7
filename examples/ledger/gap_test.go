package ledger_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// TestGap follows the runbook's gap path with both ledger projections:
// versions declared missing, or a quarantined one skipped, reach the
// ledger (projection.Description.Gap), and the versions after them apply
// instead of being quarantined.
func TestGap(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		p    func() projection.Projection
	}{
		{"Batch", func() projection.Projection { return ledger.New(nil) }},
		{"Simple", func() projection.Projection { return ledger.NewSimple(nil) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := pgtest.NewMigrated(t)
			proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema, MaxAttempts: 2, RetryBackoff: time.Millisecond}, c.p())
			require.NoError(t, err)
			require.NoError(t, proc.Setup(ctx))
			ev := func(agg string, v int64, typ string, d ledger.Data) aggregate.Event {
				e, err := aggregate.New(agg, v, typ, d)
				require.NoError(t, err)
				return e
			}
			process := func(es ...aggregate.Event) {
				t.Helper()
				_, err := proc.Process(ctx, projection.Batch{Events: es})
				require.NoError(t, err)
			}
			payment := func(id string) ledger.Payment {
				t.Helper()
				m, err := ledger.New(nil).Load(ctx, db.Pool)
				require.NoError(t, err)
				return m.Payments[id]
			}
			requireSettled := func() {
				t.Helper()
				st, err := proc.Status(ctx, nil)
				require.NoError(t, err)
				require.Zero(t, st.Projections[0].Quarantined, "nothing quarantined")
				require.Zero(t, st.Projections[0].Parked, "nothing parked")
			}

			// Version 2 never comes: declared missing, 3 and 4 apply.
			process(ev("pay-1", 1, ledger.Authorized, ledger.Data{Payer: "c", Payee: "m", Amount: 100}),
				ev("pay-1", 3, ledger.Approved, ledger.Data{}), ev("pay-1", 4, ledger.Captured, ledger.Data{Amount: 60}))
			require.NoError(t, acted(proc.DeclareGap(ctx, "ledger", "pay-1", 2, &projection.ActionOptions{Reason: "deleted at the source"})))
			require.Equal(t, ledger.Payment{ID: "pay-1", Payer: "c", Payee: "m", Status: "captured", Authorized: 100, Captured: 60, Version: 4}, payment("pay-1"))
			requireSettled()

			// A payment whose first versions are missing starts incomplete.
			process(ev("pay-2", 3, ledger.Approved, ledger.Data{}))
			require.NoError(t, acted(proc.DeclareGap(ctx, "ledger", "pay-2", 2, &projection.ActionOptions{Reason: "truncated stream"})))
			require.Equal(t, ledger.Payment{ID: "pay-2", Status: "incomplete", Version: 3}, payment("pay-2"))
			requireSettled()

			// A skipped quarantined event is a gap of one version.
			process(ev("pay-3", 1, ledger.Authorized, ledger.Data{Payer: "c", Payee: "m", Amount: 10}),
				ev("pay-3", 2, ledger.Authorized, ledger.Data{Payer: "c", Payee: "m", Amount: 10}), // authorized twice: quarantined
				ev("pay-3", 3, ledger.Voided, ledger.Data{}))
			q, err := proc.Quarantined(ctx, projection.ListOptions{})
			require.NoError(t, err)
			require.Len(t, q, 1)
			require.NoError(t, acted(proc.SkipQuarantined(ctx, "ledger", "pay-3", &projection.ActionOptions{Reason: "duplicate authorization"})))
			require.Equal(t, ledger.Payment{ID: "pay-3", Payer: "c", Payee: "m", Status: "voided", Authorized: 10, Version: 3}, payment("pay-3"))
			requireSettled()
		})
	}
}

// acted returns the error of an operator action, for the tests that check
// only that.
func acted(_ projection.ActionReport, err error) error { return err }
