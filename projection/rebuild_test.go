package projection_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// rbBundle is a processor with the ledger (and extra projections) on a pool
// whose connections carry a unique application_name, so a test can find
// their locks in pg_locks and pg_stat_activity.
type rbBundle struct {
	bundle // its requireFold included
	app    string
}

func rbSetup(t *testing.T, extra ...projection.Projection) *rbBundle {
	t.Helper()
	b := &rbBundle{bundle: bundle{db: pgtest.NewMigrated(t), ledger: ledger.New(nil)}}
	b.app = "rebuild-" + b.db.Schema
	pool := rbPool(t, b.db, b.app)
	var err error
	b.proc, err = projection.New(pool, &projection.Config{Schema: b.db.Schema, MaxAttempts: 3, RetryBackoff: time.Millisecond},
		append([]projection.Projection{b.ledger}, extra...)...)
	require.NoError(t, err)
	require.NoError(t, b.proc.Setup(t.Context()))
	return b
}

// rbPool returns a pool on db's schema whose connections have
// application_name app.
func rbPool(t *testing.T, db *pgtest.DB, app string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close) // before the schema is dropped
	return pool
}

// requireUnlocked requires that no connection of the bundle's pool holds an
// advisory lock: the rebuild released its lock.
func (b *rbBundle) requireUnlocked(t *testing.T) {
	t.Helper()
	require.Zero(t, opCount(t, b.db, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND a.application_name = $1`, b.app))
}

// rbReplay replays events in batches of size.
func rbReplay(events []aggregate.Event, size int) projection.Replay {
	return func(ctx context.Context, emit func(context.Context, []aggregate.Event) error) error {
		for batch := range slices.Chunk(events, size) {
			if err := emit(ctx, batch); err != nil {
				return err
			}
		}
		return nil
	}
}

// rbInPlace rebuilds projection name of p in place from replay.
func rbInPlace(ctx context.Context, p *projection.Processor, name string, replay projection.Replay) error {
	_, err := p.Build(ctx, name, &projection.BuildOptions{InPlace: true, Replay: replay})
	return err
}

// rbMess delivers events with pay-000000 v1 withheld (so its later versions
// park) and a conflicting copy of pay-000002 v1, then corrupts the ledger's
// balances: a state a rebuild must wipe.
func rbMess(t *testing.T, b *rbBundle, events []aggregate.Event) {
	t.Helper()
	ctx := t.Context()
	delivered := slices.DeleteFunc(slices.Clone(events), func(e aggregate.Event) bool {
		return e.Aggregate == "pay-000000" && e.Version == 1
	})
	_, err := b.proc.Process(ctx, projection.Batch{Events: delivered})
	require.NoError(t, err)
	changed := opOf(events, "pay-000002")[0]
	changed.Data = []byte(`{"payer":"mallory","payee":"mallory","amount":1}`)
	res, err := b.proc.Process(ctx, projection.Batch{Events: []aggregate.Event{changed}})
	require.NoError(t, err)
	require.Equal(t, projection.Conflict, res[0].Outcome)
	_, err = b.db.Pool.Exec(ctx, `UPDATE ledger_balances SET balance = balance + 1`)
	require.NoError(t, err)
}

func TestRebuild(t *testing.T) {
	t.Parallel()

	t.Run("EqualsFold", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := rbSetup(t)
		events := ledger.Generate(rand.New(rand.NewPCG(41, 42)), 30, 4)
		rbMess(t, b, events)
		st := opStatus(t, b.proc, "ledger")
		require.EqualValues(t, 3, st.Parked)
		require.EqualValues(t, 1, st.Conflicts)

		var progress []projection.BuildProgress
		built, err := b.proc.Build(ctx, "ledger", &projection.BuildOptions{
			InPlace:  true,
			Replay:   rbReplay(events, 25),
			Total:    int64(len(events)),
			Progress: func(p projection.BuildProgress) { progress = append(progress, p) },
		})
		require.NoError(t, err)
		require.Equal(t, "ledger", built.Projection)
		require.Equal(t, 1, built.Generation, "the live generation, rebuilt")
		require.Zero(t, built.Previous)
		require.EqualValues(t, len(events), built.Events)
		require.Positive(t, built.Elapsed)
		b.requireFold(t, events)
		require.Equal(t, projection.ProjectionStatus{Name: "ledger", Aggregates: 30, Events: int64(len(events))}, opStatus(t, b.proc, "ledger"))
		b.requireUnlocked(t)

		require.Len(t, progress, 5, "120 events in batches of 25")
		for i, p := range progress {
			require.EqualValues(t, min(25*(i+1), len(events)), p.Events)
			require.Equal(t, p.Events, p.PhaseEvents)
			require.Equal(t, projection.PhaseReplay, p.Phase)
			require.Equal(t, "ledger", p.Projection)
			require.Equal(t, 1, p.Generation)
			require.InDelta(t, float64(p.Events)/float64(len(events)), p.Fraction, 1e-9)
			require.Positive(t, p.Elapsed)
			require.Positive(t, p.Rate)
			if i < len(progress)-1 {
				require.Positive(t, p.ETA)
			}
		}
		require.Zero(t, progress[4].ETA)

		require.Equal(t, []opLog{{Action: "rebuild-start", Projection: "ledger"}}, opLogRows(t, b.db, "rebuild-start"))
		done := opLogRows(t, b.db, "rebuild-done")
		require.Len(t, done, 1)
		require.Contains(t, done[0].Reason, "120 events")

		// Live deliveries resume on the rebuilt gate state.
		res, err := b.proc.Process(ctx, projection.Batch{Events: events})
		require.NoError(t, err)
		requireEvery(t, projection.Duplicate, res)
	})

	t.Run("PausesLiveWorkers", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := rbSetup(t)
		events := ledger.Generate(rand.New(rand.NewPCG(43, 44)), 20, 4)
		head, tail := events[:40], events[40:]
		_, err := b.proc.Process(ctx, projection.Batch{Events: head})
		require.NoError(t, err)

		// A live worker in another process: its own pool and processor.
		liveApp := "live-" + b.db.Schema
		live, err := projection.New(rbPool(t, b.db, liveApp), &projection.Config{Schema: b.db.Schema}, ledger.New(nil))
		require.NoError(t, err)

		holding, release := make(chan struct{}), make(chan struct{})
		rebuilt := make(chan error, 1)
		go func() {
			rebuilt <- rbInPlace(ctx, b.proc, "ledger", func(ctx context.Context, emit func(context.Context, []aggregate.Event) error) error {
				if err := emit(ctx, head[:20]); err != nil {
					return err
				}
				close(holding)
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
				return emit(ctx, head[20:])
			})
		}()
		<-holding

		type result struct {
			res []projection.Result
			err error
		}
		processed := make(chan result, 1)
		go func() {
			res, err := live.Process(ctx, projection.Batch{Events: tail})
			processed <- result{res, err}
		}()
		operated := make(chan error, 1)
		applied := int64(len(opOf(head, "pay-000000")))
		require.Positive(t, applied)
		go func() {
			operated <- acted(live.DeclareGap(ctx, "ledger", "pay-000000", applied, &projection.ActionOptions{Reason: "during a rebuild"}))
		}()
		// Wait until the live batch and the operator action wait on the
		// rebuild lock; neither may return meanwhile.
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		timeout := time.After(30 * time.Second)
		for waiting := false; !waiting; {
			select {
			case r := <-processed:
				t.Fatalf("Process returned while the rebuild held the lock: %v", r.err)
			case err := <-operated:
				t.Fatalf("DeclareGap returned while the rebuild held the lock: %v", err)
			case <-timeout:
				t.Fatal("Process and DeclareGap never waited on the rebuild lock")
			case <-tick.C:
				waiting = opCount(t, b.db, `SELECT count(*) FROM pg_stat_activity
WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event = 'advisory'`, liveApp) == 2
			}
		}
		select {
		case r := <-processed:
			t.Fatalf("Process returned while the rebuild held the lock: %v", r.err)
		case err := <-operated:
			t.Fatalf("DeclareGap returned while the rebuild held the lock: %v", err)
		default:
		}

		close(release)
		require.NoError(t, <-rebuilt)
		// It saw the rebuilt state: the version is applied.
		require.ErrorIs(t, <-operated, projection.ErrBadGap)
		r := <-processed
		require.NoError(t, r.err)
		for _, res := range r.res {
			require.Equal(t, projection.Applied, res.Outcome)
		}
		b.requireFold(t, events)
		b.requireUnlocked(t)
	})

	t.Run("FailedHalfWayIsRerun", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := rbSetup(t)
		events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(45, 46)), 30, 4)

		errGone := errors.New("event store went away")
		err := rbInPlace(ctx, b.proc, "ledger", func(ctx context.Context, emit func(context.Context, []aggregate.Event) error) error {
			if err := rbReplay(events[:50], 25)(ctx, emit); err != nil {
				return err
			}
			return errGone
		})
		require.ErrorIs(t, err, errGone)
		b.requireUnlocked(t)
		require.EqualValues(t, 50, opStatus(t, b.proc, "ledger").Events, "half rebuilt")
		// Live work is not blocked.
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err := b.proc.Process(pctx, projection.Batch{Events: events[:1]})
		require.NoError(t, err)
		require.Equal(t, projection.Duplicate, res[0].Outcome)

		require.NoError(t, rbInPlace(ctx, b.proc, "ledger", rbReplay(events, 40)))
		b.requireFold(t, events)
		require.Len(t, opLogRows(t, b.db, "rebuild-start"), 2)
		require.Len(t, opLogRows(t, b.db, "rebuild-done"), 1)
	})

	t.Run("CancelledHalfWayIsRerun", func(t *testing.T) {
		t.Parallel()
		b := rbSetup(t)
		events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(47, 48)), 30, 4)

		ctx, cancel := context.WithCancel(t.Context())
		err := rbInPlace(ctx, b.proc, "ledger", func(ctx context.Context, emit func(context.Context, []aggregate.Event) error) error {
			if err := emit(ctx, events[:30]); err != nil {
				return err
			}
			cancel() // killed half-way
			return emit(ctx, events[30:])
		})
		require.ErrorIs(t, err, context.Canceled)
		b.requireUnlocked(t)
		require.EqualValues(t, 30, opStatus(t, b.proc, "ledger").Events)

		require.NoError(t, rbInPlace(t.Context(), b.proc, "ledger", rbReplay(events, 40)))
		b.requireFold(t, events)
	})

	t.Run("SwallowedEmitErrorFails", func(t *testing.T) {
		t.Parallel()
		b := rbSetup(t)
		events := ledger.Generate(rand.New(rand.NewPCG(49, 50)), 5, 2)
		err := rbInPlace(t.Context(), b.proc, "ledger", func(ctx context.Context, emit func(context.Context, []aggregate.Event) error) error {
			dead, cancel := context.WithCancel(ctx)
			cancel()
			_ = emit(dead, events) // a careless replay
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		require.Empty(t, opLogRows(t, b.db, "rebuild-done"))
		b.requireUnlocked(t)
	})

	t.Run("OtherProjectionUntouched", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := rbSetup(t, opFaultyBatch{opJournal{"journal"}, newOpFault("pay-000001", 2)})
		events := ledger.Generate(rand.New(rand.NewPCG(51, 52)), 10, 3)
		rbMess(t, b, events)
		before := rbSnapshot(t, b, "journal")
		require.NotEmpty(t, before.Quarantined)
		require.NotEmpty(t, before.Conflicts)
		require.NotEmpty(t, before.Parked)

		require.NoError(t, rbInPlace(ctx, b.proc, "ledger", rbReplay(events, 7)))
		b.requireFold(t, events)
		require.Equal(t, before, rbSnapshot(t, b, "journal"))
		st, err := b.proc.Status(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, projection.ProjectionStatus{Name: "ledger", Aggregates: 10, Events: int64(len(events))}, st.Projections[1])
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		b := rbSetup(t, rbNoReset{opJournal{"plain"}})
		replay := rbReplay(nil, 1)
		require.ErrorIs(t, rbInPlace(t.Context(), b.proc, "nope", replay), projection.ErrUnknownProjection)
		require.ErrorIs(t, rbInPlace(t.Context(), b.proc, "plain", replay), projection.ErrNotResettable)
		_, err := b.proc.Build(t.Context(), "ledger", &projection.BuildOptions{InPlace: true})
		require.ErrorContains(t, err, "BuildOptions.Replay is required")
		require.Empty(t, opLogRows(t, b.db, "rebuild-start"))
	})
}

// rbNoReset is a projection that cannot be rebuilt.
type rbNoReset struct{ projection.BatchHandler }

// rbState is everything inorder and the journal keep for one projection.
type rbState struct {
	Journal     []rbJournalRow
	Versions    []rbVersionRow
	Applied     int64
	Parked      []rbParkedRow
	Quarantined []projection.QuarantineEntry
	Conflicts   []projection.ConflictEntry
	Status      projection.ProjectionStatus
}

type rbJournalRow struct {
	Aggregate string
	Version   int64
	Seq       int64
}

type rbVersionRow struct {
	Aggregate string
	Version   int64
	Parked    int32
	Blocked   bool
	UpdatedAt time.Time
}

type rbParkedRow struct {
	Aggregate string
	Version   int64
	ParkedAt  time.Time
}

func rbSnapshot(t *testing.T, b *rbBundle, name string) rbState {
	t.Helper()
	ctx := t.Context()
	var s rbState
	var err error
	rows, err := b.db.Pool.Query(ctx, `SELECT aggregate, version, seq FROM op_journal WHERE projection = $1 ORDER BY seq`, name)
	require.NoError(t, err)
	s.Journal, err = pgx.CollectRows(rows, pgx.RowToStructByPos[rbJournalRow])
	require.NoError(t, err)
	rows, err = b.db.Pool.Query(ctx, `SELECT aggregate, version, parked, blocked, updated_at FROM versions
WHERE projection = $1 ORDER BY aggregate`, name)
	require.NoError(t, err)
	s.Versions, err = pgx.CollectRows(rows, pgx.RowToStructByPos[rbVersionRow])
	require.NoError(t, err)
	s.Applied = opCount(t, b.db, `SELECT count(*) FROM applied_log WHERE projection = $1`, name)
	rows, err = b.db.Pool.Query(ctx, `SELECT aggregate, version, parked_at FROM parked WHERE projection = $1 ORDER BY aggregate, version`, name)
	require.NoError(t, err)
	s.Parked, err = pgx.CollectRows(rows, pgx.RowToStructByPos[rbParkedRow])
	require.NoError(t, err)
	s.Quarantined, err = b.proc.Quarantined(ctx, projection.ListOptions{Projection: name})
	require.NoError(t, err)
	s.Conflicts, err = b.proc.Conflicts(ctx, projection.ListOptions{Projection: name})
	require.NoError(t, err)
	s.Status = opStatus(t, b.proc, name)
	return s
}
