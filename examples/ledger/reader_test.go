package ledger_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// readerBundle is a ledger fed a generated stream, and its in-order fold.
type readerBundle struct {
	db   *pgtest.DB
	proc *projection.Processor
	want *ledger.Model
}

func setupReader(t *testing.T, p projection.Projection) *readerBundle {
	t.Helper()
	db, proc, _, want := ledgertest.Fed(t, projection.Config{}, rand.New(rand.NewPCG(7, 8)), 40, 4, p)
	return &readerBundle{db: db, proc: proc, want: want}
}

func TestReader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	for _, tc := range []struct {
		name string
		p    interface {
			projection.Projection
			projection.Reader
		}
	}{
		{"Batch", ledger.New(nil)},
		{"Simple", ledger.NewSimple(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupReader(t, tc.p)
			rd := tc.p

			t.Run("GetEveryPayment", func(t *testing.T) {
				for id, pm := range b.want.Payments {
					v, found, err := rd.Get(ctx, b.db.Pool, id)
					require.NoError(t, err)
					require.True(t, found)
					view := v.(*ledger.PaymentView)
					require.Equal(t, pm, view.Payment)
					var legs []ledger.Leg
					for _, l := range b.want.Legs {
						if l.Payment == id {
							legs = append(legs, l)
						}
					}
					require.Equal(t, legs, view.Legs)
					require.False(t, view.UpdatedAt.IsZero())
				}
			})

			t.Run("GetMissing", func(t *testing.T) {
				for _, id := range []string{"pay-999999", "'; DROP TABLE ledger_payments; --", "../pay-000001", "ünïcødé"} {
					v, found, err := rd.Get(ctx, b.db.Pool, id)
					require.NoError(t, err)
					require.False(t, found)
					require.Nil(t, v)
				}
			})

			t.Run("ListPagesInByteOrder", func(t *testing.T) {
				var got []string
				after := ""
				for pages := 0; ; pages++ {
					require.Less(t, pages, 100)
					items, next, err := rd.List(ctx, b.db.Pool, projection.ListQuery{After: after, Limit: 7})
					require.NoError(t, err)
					require.LessOrEqual(t, len(items), 7)
					for _, it := range items {
						s := it.(*ledger.PaymentSummary)
						require.Equal(t, b.want.Payments[s.ID], s.Payment)
						got = append(got, s.ID)
					}
					if next == "" {
						break
					}
					require.Equal(t, got[len(got)-1], next)
					after = next
				}
				var want []string
				for id := range b.want.Payments {
					want = append(want, id)
				}
				slices.Sort(want)
				require.Equal(t, want, got)
			})

			t.Run("ListFilters", func(t *testing.T) {
				var one ledger.Payment
				for _, pm := range b.want.Payments {
					one = pm
					break
				}
				for _, f := range []map[string]string{
					{"status": one.Status},
					{"payer": one.Payer},
					{"payee": one.Payee, "status": one.Status},
					{"status": "'; DROP TABLE ledger_payments; --"},
				} {
					items, next, err := rd.List(ctx, b.db.Pool, projection.ListQuery{Filters: f, Limit: 500})
					require.NoError(t, err)
					require.Empty(t, next)
					var got, want []string
					for _, it := range items {
						got = append(got, it.(*ledger.PaymentSummary).ID)
					}
					for id, pm := range b.want.Payments {
						fields := map[string]string{"status": pm.Status, "payer": pm.Payer, "payee": pm.Payee}
						match := true
						for k, v := range f {
							match = match && fields[k] == v
						}
						if match {
							want = append(want, id)
						}
					}
					slices.Sort(want)
					require.Equal(t, want, got, "filters %v", f)
				}
			})

			t.Run("UnknownFilter", func(t *testing.T) {
				_, _, err := rd.List(ctx, b.db.Pool, projection.ListQuery{Filters: map[string]string{"amount": "1"}})
				require.ErrorIs(t, err, projection.ErrUnknownFilter)
			})

			t.Run("ReadAggregate", func(t *testing.T) {
				view, err := b.proc.ReadAggregate(ctx, tc.p.Name(), "pay-000003")
				require.NoError(t, err)
				require.True(t, view.Found)
				require.Equal(t, int64(4), view.Version)
				require.Equal(t, b.want.Payments["pay-000003"], view.Value.(*ledger.PaymentView).Payment)

				view, err = b.proc.ReadAggregate(ctx, tc.p.Name(), "nope")
				require.NoError(t, err)
				require.Equal(t, projection.AggregateView{}, view)

				_, err = b.proc.ReadAggregate(ctx, "other", "pay-000003")
				require.ErrorIs(t, err, projection.ErrUnknownProjection)
			})
		})
	}
}
