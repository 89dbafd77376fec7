package projection_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/projection/projectiontest"
)

// ledgerModel is what both ledger variants offer to read their read model.
type ledgerModel interface {
	projection.Projection
	Load(ctx context.Context, q interface {
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	}) (*ledger.Model, error)
}

// ledgerSubject is a conformance subject whose processor runs the ledger
// projections mk returns for a test's database.
func ledgerSubject(mk func(t *testing.T, db *pgtest.DB) []ledgerModel) projectiontest.Subject {
	return projectiontest.Subject{
		Generate: ledger.Generate,
		New: func(t *testing.T) *projectiontest.Case {
			db := pgtest.NewMigrated(t)
			ls := mk(t, db)
			ps := make([]projection.Projection, len(ls))
			for i, l := range ls {
				ps[i] = l
			}
			proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema}, ps...)
			require.NoError(t, err)
			require.NoError(t, proc.Setup(t.Context()))
			return &projectiontest.Case{
				Processor: proc,
				Check: func(t *testing.T, events []aggregate.Event) {
					t.Helper()
					want, err := ledger.Fold(events)
					require.NoError(t, err)
					for _, l := range ls {
						got, err := l.Load(t.Context(), db.Pool)
						require.NoError(t, err)
						require.Equal(t, want, got, l.Name())
					}
				},
			}
		},
	}
}

// TestConformanceLedger runs the conformance suite on the set-based ledger,
// an inline projection (projection.Inline): its fast path writes no version
// row.
func TestConformanceLedger(t *testing.T) {
	t.Parallel()
	projectiontest.Run(t, ledgerSubject(func(*testing.T, *pgtest.DB) []ledgerModel {
		return []ledgerModel{ledger.New(nil)}
	}), projectiontest.Features{})
}

// TestConformanceLedgerVersionRows runs the conformance suite on the
// set-based ledger keeping its gate state in version rows (not inline).
func TestConformanceLedgerVersionRows(t *testing.T) {
	t.Parallel()
	projectiontest.Run(t, ledgerSubject(func(*testing.T, *pgtest.DB) []ledgerModel {
		return []ledgerModel{ledger.New(&ledger.Options{VersionRows: true})}
	}), projectiontest.Features{})
}

// TestConformanceLedgerSimple runs the conformance suite on the per-event
// ledger, with a smaller workload: it reads each payment with its own query.
func TestConformanceLedgerSimple(t *testing.T) {
	t.Parallel()
	projectiontest.Run(t, ledgerSubject(func(*testing.T, *pgtest.DB) []ledgerModel {
		return []ledgerModel{ledger.NewSimple(nil)}
	}), projectiontest.Features{Seeds: 2, Aggregates: 200, MaxBatch: 100})
}

// TestConformanceTwoProjections runs the conformance suite on one processor
// with two projections — the set-based ledger (inline) and the per-event
// ledger (version rows), each with its own tables — so every batch goes
// through two gates of both kinds in one transaction.
func TestConformanceTwoProjections(t *testing.T) {
	t.Parallel()
	projectiontest.Run(t, ledgerSubject(func(t *testing.T, db *pgtest.DB) []ledgerModel {
		batch, event := db.Schema+"_batch", db.Schema+"_event"
		t.Cleanup(func() {
			_, err := db.Pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{batch}.Sanitize()+`, `+
				pgx.Identifier{event}.Sanitize()+` CASCADE`)
			require.NoError(t, err)
		})
		return []ledgerModel{
			ledger.New(&ledger.Options{Name: "ledger-batch", Schema: batch}),
			ledger.NewSimple(&ledger.Options{Name: "ledger-event", Schema: event, VersionRows: true}),
		}
	}), projectiontest.Features{Seeds: 2, Aggregates: 200, MaxBatch: 100})
}

// TestConformanceRedelivery runs the conformance suite through a custom
// Case.Deliver that acts like an at-least-once source whose acks get lost:
// every batch is processed, then delivered again.
func TestConformanceRedelivery(t *testing.T) {
	t.Parallel()
	subject := ledgerSubject(func(*testing.T, *pgtest.DB) []ledgerModel {
		return []ledgerModel{ledger.New(nil)}
	})
	newCase := subject.New
	subject.New = func(t *testing.T) *projectiontest.Case {
		c := newCase(t)
		c.Deliver = func(ctx context.Context, events []aggregate.Event) error {
			for range 2 {
				if _, err := c.Processor.Process(ctx, projection.Batch{Events: events, Source: "redelivery"}); err != nil {
					return err
				}
			}
			return nil
		}
		return c
	}
	projectiontest.Run(t, subject, projectiontest.Features{Seeds: 1, Aggregates: 300})
}
