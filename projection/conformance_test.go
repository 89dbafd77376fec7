package projection_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
			return conformanceCase(t, db, func(t *testing.T, events []aggregate.Event) {
				t.Helper()
				want, err := ledger.Fold(events)
				require.NoError(t, err)
				for _, l := range ls {
					got, err := l.Load(t.Context(), db.Pool)
					require.NoError(t, err)
					require.Equal(t, want, got, l.Name())
				}
			}, ps...)
		},
	}
}

// conformanceCase returns a conformance case of a processor of
// projections, set up on db, whose read model check is check.
func conformanceCase(t *testing.T, db *pgtest.DB, check func(*testing.T, []aggregate.Event), projections ...projection.Projection) *projectiontest.Case {
	t.Helper()
	proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema}, projections...)
	require.NoError(t, err)
	require.NoError(t, proc.Setup(t.Context()))
	return &projectiontest.Case{Processor: proc, Check: check}
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

// orderLog is an inline projection that trusts the gate with everything:
// its handler records the versions it is given, in the order given, and
// checks nothing, so the suite's check sees any version applied out of
// order, twice or not at all — which a projection that validates its
// events (the ledger refuses a payment that does not start with its
// authorization) would turn into a handler error instead.
type orderLog struct{}

func (orderLog) Name() string { return "order-log" }
func (orderLog) Setup(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS order_log (id text PRIMARY KEY, version bigint NOT NULL,
  log bytea NOT NULL DEFAULT '', applied text NOT NULL)`)
	return err
}
func (orderLog) InlineTable() (projection.InlineTable, bool) { return orderLogUpsert.Table, true }

// orderLogUpsert is the upsert of orderLog's rows: applied grows by the
// versions of each call.
var orderLogUpsert = projection.InlineUpsert{
	Table:   projection.InlineTable{Table: pgx.Identifier{"order_log"}, Key: "id", Version: "version", Log: "log"},
	Alias:   "t",
	Columns: []projection.InlineColumn{{Name: "applied", Type: "text", Update: "t.applied || EXCLUDED.applied"}},
}

func (orderLog) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE order_log`)
	return err
}

// ApplyBatch writes each aggregate's row once, with the versions of its
// run appended to the row's list.
func (o orderLog) ApplyBatch(ctx context.Context, tx *projection.Tx, events []aggregate.Event) error {
	runs := tx.InlineRuns()
	ids, applied, vers := make([]string, len(runs)), make([]string, len(runs)), make([]int64, len(runs))
	k := 0
	for i, ru := range runs {
		ids[i], vers[i] = ru.Aggregate, ru.Version
		var list strings.Builder
		for ; k < len(events) && events[k].Aggregate == ru.Aggregate; k++ {
			fmt.Fprintf(&list, "%d,", events[k].Version)
		}
		applied[i] = list.String()
	}
	if k != len(events) {
		return fmt.Errorf("order-log: %d events, %d in the inline runs", len(events), k)
	}
	return orderLogUpsert.Queue(tx, ids, vers, applied)
}

// TestConformanceInlineOrder runs the conformance suite on orderLog: every
// aggregate's row must list its versions from 1, each once, in order.
func TestConformanceInlineOrder(t *testing.T) {
	t.Parallel()
	projectiontest.Run(t, projectiontest.Subject{
		Generate: ledger.Generate,
		New: func(t *testing.T) *projectiontest.Case {
			db := pgtest.NewMigrated(t)
			return conformanceCase(t, db, func(t *testing.T, events []aggregate.Event) {
				t.Helper()
				want := map[string]string{}
				for _, e := range events {
					want[e.Aggregate] += strconv.FormatInt(e.Version, 10) + ","
				}
				got := map[string]string{}
				rows, err := db.Pool.Query(t.Context(), `SELECT id, applied FROM order_log`)
				require.NoError(t, err)
				var id, applied string
				_, err = pgx.ForEachRow(rows, []any{&id, &applied}, func() error {
					got[id] = applied
					return nil
				})
				require.NoError(t, err)
				require.Equal(t, want, got)
			}, orderLog{})
		},
	}, projectiontest.Features{Seeds: 2, Aggregates: 200, MaxBatch: 100})
}
