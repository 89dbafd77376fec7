package projection_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/projection"
)

func TestBuild(t *testing.T) {
	t.Parallel()

	t.Run("SideBySideThenSwitch", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := genSetup(t)
		events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(1, 2)), 60, 5)
		before := genModel(t, b, "")
		require.Equal(t, genFold(t, events), before)

		var phases []string
		res, err := b.proc.Build(ctx, "ledger", &projection.BuildOptions{Stream: newGenStream(events, 37), BatchSize: 50,
			Progress: func(pr projection.BuildProgress) {
				if len(phases) == 0 || phases[len(phases)-1] != pr.Phase {
					phases = append(phases, pr.Phase)
				}
			}})
		require.NoError(t, err)
		require.Equal(t, 2, res.Generation)
		require.Equal(t, 1, res.Previous)
		require.EqualValues(t, len(events), res.Events)
		require.Equal(t, []string{projection.PhaseReplay, projection.PhaseFinalize, projection.PhaseCatchUp, projection.PhaseVerify,
			projection.PhaseSwitch}, phases)

		live := genLive(t, b.proc)
		require.Equal(t, 2, live.Generation)
		require.Equal(t, "ledger@2", live.Key)
		require.NotEmpty(t, live.Schema)
		require.Equal(t, map[int]string{1: projection.StatePrevious, 2: projection.StateLive}, genStates(t, b.proc))
		require.Equal(t, genFold(t, events), genModel(t, b, live.Schema))
		st, err := b.proc.Status(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, projection.ProjectionStatus{Name: "ledger", Aggregates: 60, Events: int64(len(events))}, st.Projections[0])
		require.Len(t, st.Generations, 2)

		// The processor now feeds both generations; reads use generation 2.
		more := ledger.Generate(rand.New(rand.NewPCG(3, 4)), 10, 3)
		for i := range more {
			more[i].Aggregate = "new-" + more[i].Aggregate
		}
		res2, err := b.proc.Process(ctx, projection.Batch{Events: append(slices.Clone(more), events[:5]...)})
		require.NoError(t, err)
		for i, r := range res2 {
			want := projection.Applied
			if i >= len(more) {
				want = projection.Duplicate
			}
			require.Equal(t, want, r.Outcome, i)
			require.Equal(t, []projection.Outcome{want}, r.Projections)
		}
		all := append(slices.Clone(events), more...)
		require.Equal(t, genFold(t, all), genModel(t, b, live.Schema))
		require.Equal(t, genFold(t, all), genModel(t, b, ""), "the previous generation is fed too")
		v, err := b.proc.ReadAggregate(ctx, "ledger", more[0].Aggregate)
		require.NoError(t, err)
		require.True(t, v.Found)
		require.Positive(t, v.Version)
		ver, err := b.proc.Version(ctx, "ledger", more[0].Aggregate)
		require.NoError(t, err)
		require.Equal(t, v.Version, ver)
		require.Len(t, opLogRows(t, b.db, "rebuild-switch"), 1)
	})

	// A rebuild started from a processor with Config.Owner: its catch-up
	// feeds through a processor of its own, which must not take leases —
	// nothing would end them, and a lease held by a connection that stays
	// open can be neither taken over nor vacated.
	t.Run("FromAnOwner", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := genSetup(t)
		owner, err := projection.New(b.db.Pool, &projection.Config{Schema: b.db.Schema, Owner: true}, b.ledger)
		require.NoError(t, err)
		all := ledger.Generate(rand.New(rand.NewPCG(5, 6)), 40, 4)
		half := len(all) / 2
		_, err = owner.Process(ctx, projection.Batch{Events: all[:half]})
		require.NoError(t, err)
		stream := newGenStream(all[:half], 20)
		next := half
		res, err := owner.Build(ctx, "ledger", &projection.BuildOptions{Stream: stream, BatchSize: 20,
			Progress: func(pr projection.BuildProgress) {
				// Events the catch-up reads (the owner delivers them too).
				if pr.Phase == projection.PhaseFinalize && next < len(all) {
					hi := min(next+10, len(all))
					stream.Append(all[next:hi]...)
					_, err := owner.Process(ctx, projection.Batch{Events: all[next:hi]})
					require.NoError(t, err)
					next = hi
				}
			}})
		require.NoError(t, err)
		require.Equal(t, 2, res.Generation)
		require.Greater(t, next, half, "events appended before the catch-up")
		require.NoError(t, owner.Close(ctx))
		var held []string
		rows, err := b.db.Pool.Query(ctx, `SELECT gate_key FROM owners WHERE holder <> '' ORDER BY 1`)
		require.NoError(t, err)
		held, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Empty(t, held, "leases held once the owner closed")
	})
}

// genVerifyFails is the ledger with a Verify that fails.
type genVerifyFails struct{ *ledger.Projection }

func (g genVerifyFails) Describe() projection.Description {
	d := g.Projection.Describe()
	d.Verify = func(context.Context, pgx.Tx) error { return errors.New("invariant broken") }
	return d
}

func TestBuildVerification(t *testing.T) {
	t.Parallel()

	t.Run("RepairSeesDamageUnlessExpected", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := genSetup(t)
		events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(5, 6)), 40, 4)
		// Damage the live read model (balances only: the ledger's own
		// Verify does not look at the live generation).
		_, err := b.db.Pool.Exec(ctx, `UPDATE ledger_balances SET balance = balance + 7 WHERE account = (SELECT min(account) FROM ledger_balances)`)
		require.NoError(t, err)

		_, err = b.proc.Build(ctx, "ledger", &projection.BuildOptions{Stream: newGenStream(events, 25), VerifyTimeout: 5 * time.Second})
		var verr *projection.VerificationError
		require.ErrorAs(t, err, &verr)
		require.Equal(t, 2, verr.Generation)
		require.Len(t, verr.Problems, 1)
		require.Contains(t, verr.Problems[0], "table ledger_balances")
		require.Equal(t, map[int]string{1: projection.StateLive, 2: projection.StateFailed}, genStates(t, b.proc))
		gens, err := b.proc.Generations(ctx, "ledger")
		require.NoError(t, err)
		require.Contains(t, gens[1].Error, "ledger_balances")
		require.Len(t, opLogRows(t, b.db, "rebuild-failed"), 1)
		// The failed generation is kept, not fed.
		require.Equal(t, genFold(t, events), genModel(t, b, gens[1].Schema))

		res, err := b.proc.Build(ctx, "ledger", &projection.BuildOptions{Stream: newGenStream(events, 25), ExpectChanges: true})
		require.NoError(t, err)
		require.Equal(t, 3, res.Generation)
		require.Equal(t, map[int]string{1: projection.StatePrevious, 2: projection.StateFailed, 3: projection.StateLive}, genStates(t, b.proc))
		require.Equal(t, genFold(t, events), genModel(t, b, genLive(t, b.proc).Schema))

		require.NoError(t, acted(b.proc.DropGeneration(ctx, "ledger", &projection.ActionOptions{Generation: 2})))
		require.ErrorIs(t, acted(b.proc.DropGeneration(ctx, "ledger", &projection.ActionOptions{Generation: 3})), projection.ErrLiveGeneration)
		require.ErrorIs(t, acted(b.proc.DropGeneration(ctx, "ledger", &projection.ActionOptions{Generation: 9})), projection.ErrNoGeneration)
		require.Equal(t, map[int]string{1: projection.StatePrevious, 2: projection.StateDropped, 3: projection.StateLive}, genStates(t, b.proc))
		require.Zero(t, opCount(t, b.db, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, gens[1].Schema))
		require.Zero(t, opCount(t, b.db, `SELECT count(*) FROM versions WHERE projection = 'ledger@2'`))
	})

	t.Run("FailingVerifyKeepsTheLiveGeneration", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := genSetup(t)
		events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(7, 8)), 20, 3)
		failing := genProcessor(t, b.db, genVerifyFails{b.ledger})
		_, err := failing.Build(ctx, "ledger", &projection.BuildOptions{Stream: newGenStream(events, 25)})
		var verr *projection.VerificationError
		require.ErrorAs(t, err, &verr)
		require.Equal(t, []string{"Verify: invariant broken"}, verr.Problems)
		require.Equal(t, map[int]string{1: projection.StateLive, 2: projection.StateFailed}, genStates(t, b.proc))
		// Live work goes on, on generation 1 only.
		more := ledger.Generate(rand.New(rand.NewPCG(9, 10)), 5, 2)
		for i := range more {
			more[i].Aggregate = "x-" + more[i].Aggregate
		}
		_, err = b.proc.Process(ctx, projection.Batch{Events: more})
		require.NoError(t, err)
		require.Equal(t, genFold(t, append(slices.Clone(events), more...)), genModel(t, b, ""))
		require.Zero(t, opCount(t, b.db, `SELECT count(*) FROM versions WHERE projection = 'ledger@2' AND aggregate LIKE 'x-%'`))
	})

	t.Run("QuarantineBeyondTheLiveOneFails", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := genSetup(t)
		events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(11, 12)), 20, 3)
		faulty := genProcessor(t, b.db, opFaultyBatch{b.ledger, newOpFault("pay-000003", 2)})
		_, err := faulty.Build(ctx, "ledger", &projection.BuildOptions{Stream: newGenStream(events, 10), BatchSize: 20})
		var verr *projection.VerificationError
		require.ErrorAs(t, err, &verr)
		require.Len(t, verr.Problems, 1)
		require.Contains(t, verr.Problems[0], "1 events quarantined")
		q, err := faulty.Quarantined(ctx, projection.ListOptions{})
		require.NoError(t, err)
		require.Empty(t, q, "the listings show the live generation by default")
		q, err = faulty.Quarantined(ctx, projection.ListOptions{Generation: 2})
		require.NoError(t, err)
		require.Len(t, q, 1)
		require.Equal(t, "ledger", q[0].Projection)
		require.Equal(t, 2, q[0].Generation)
		require.Equal(t, "pay-000003", q[0].Aggregate)
		require.EqualValues(t, 2, q[0].Version)
	})

	t.Run("RollbackAndForth", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := genSetup(t)
		events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(13, 14)), 30, 4)
		_, err := b.proc.Rollback(ctx, "ledger", nil)
		require.ErrorIs(t, err, projection.ErrNoPrevious)
		_, err = b.proc.Build(ctx, "ledger", &projection.BuildOptions{Stream: newGenStream(events, 25)})
		require.NoError(t, err)
		dry, err := b.proc.Rollback(ctx, "ledger", &projection.ActionOptions{DryRun: true})
		require.NoError(t, err)
		require.Equal(t, 1, dry.Generation, "the dry run says which generation would be live")
		require.Equal(t, map[int]string{1: projection.StatePrevious, 2: projection.StateLive}, genStates(t, b.proc), "and changes nothing")
		to, err := b.proc.Rollback(ctx, "ledger", &projection.ActionOptions{By: "ops"})
		require.NoError(t, err)
		require.Equal(t, 1, to.Generation)
		require.Equal(t, map[int]string{1: projection.StateLive, 2: projection.StatePrevious}, genStates(t, b.proc))
		// Both stay fed, and reads follow the live one.
		_, err = b.db.Pool.Exec(ctx, `UPDATE ledger_payments SET status = 'marked' WHERE payment_id = 'pay-000001'`)
		require.NoError(t, err)
		v, err := b.proc.ReadAggregate(ctx, "ledger", "pay-000001")
		require.NoError(t, err)
		require.Equal(t, "marked", v.Value.(*ledger.PaymentView).Status)
		more := ledger.Generate(rand.New(rand.NewPCG(15, 16)), 5, 2)
		for i := range more {
			more[i].Aggregate = "y-" + more[i].Aggregate
		}
		_, err = b.proc.Process(ctx, projection.Batch{Events: more})
		require.NoError(t, err)
		gens, err := b.proc.Generations(ctx, "ledger")
		require.NoError(t, err)
		require.Equal(t, genFold(t, append(slices.Clone(events), more...)), genModel(t, b, gens[1].Schema))
		to, err = b.proc.Rollback(ctx, "ledger", nil)
		require.NoError(t, err)
		require.Equal(t, 2, to.Generation)
		v, err = b.proc.ReadAggregate(ctx, "ledger", "pay-000001")
		require.NoError(t, err)
		require.NotEqual(t, "marked", v.Value.(*ledger.PaymentView).Status)
		require.Len(t, opLogRows(t, b.db, "rebuild-rollback"), 2)
	})
}

func TestBuildReplay(t *testing.T) {
	t.Parallel()

	t.Run("IrregularStreamGoesThroughTheGate", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := genSetupRows(t) // it counts the version rows' applied log
		events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(17, 18)), 30, 6)
		// The log holds copies, and versions out of order: 3 before 2.
		log := slices.Clone(events)
		log = append(log, events[7], events[8])
		var a3, a2 int
		for i, e := range log {
			if e.Aggregate == "pay-000004" && e.Version == 2 {
				a2 = i
			}
			if e.Aggregate == "pay-000004" && e.Version == 3 {
				a3 = i
			}
		}
		log[a2], log[a3] = log[a3], log[a2]
		log = append(log[:50], append([]aggregate.Event{events[3]}, log[50:]...)...)
		res, err := b.proc.Build(ctx, "ledger", &projection.BuildOptions{Stream: newGenStream(log, 13), BatchSize: 20})
		require.NoError(t, err)
		require.Equal(t, 2, res.Generation)
		require.Equal(t, genFold(t, events), genModel(t, b, genLive(t, b.proc).Schema))
		st := opStatus(t, b.proc, "ledger")
		require.Zero(t, st.Parked)
		require.Zero(t, st.Conflicts)
		// The aggregates the gate took have their applied log.
		require.EqualValues(t, len(events), opCount(t, b.db, `SELECT count(*) FROM applied_log WHERE projection = 'ledger@2'`))
		// Redeliveries after the switch are duplicates, not conflicts.
		out, err := b.proc.Process(ctx, projection.Batch{Events: events})
		require.NoError(t, err)
		requireEvery(t, projection.Duplicate, out)
	})

	t.Run("InlineIrregularStreamUnlogged", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		b := genSetup(t) // the inline ledger: no journal, its rows hold the versions
		events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(17, 19)), 30, 6)
		// Copies, and an aggregate's versions out of order, so that some
		// aggregates go through the gate; few aggregates kept in memory, so
		// that the replay looks the others up in the rows.
		log := slices.Clone(events)
		log = append(log, events[7], events[8])
		log[0], log[1] = log[1], log[0]
		res, err := b.proc.Build(ctx, "ledger", &projection.BuildOptions{Stream: newGenStream(log, 13), BatchSize: 20,
			MaxAggregates: 4, Unlogged: true})
		require.NoError(t, err)
		require.Equal(t, 2, res.Generation)
		live := genLive(t, b.proc)
		require.Equal(t, genFold(t, events), genModel(t, b, live.Schema))
		st := opStatus(t, b.proc, "ledger")
		require.Zero(t, st.Parked)
		require.Zero(t, st.Conflicts)
		// Made logged at the end.
		require.Zero(t, opCount(t, b.db, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = '`+live.Schema+`' AND c.relkind = 'r' AND c.relpersistence <> 'p' AND c.relname NOT LIKE '\_inorder%'`))
		// Every aggregate has its version row, at its row's version.
		require.EqualValues(t, 30, opCount(t, b.db, `SELECT count(*) FROM versions WHERE projection = 'ledger@2'`))
		// Redeliveries after the switch are duplicates; a changed payload of
		// a version the rows' logs hold is a conflict.
		out, err := b.proc.Process(ctx, projection.Batch{Events: events})
		require.NoError(t, err)
		requireEvery(t, projection.Duplicate, out)
		changed := events[2]
		changed.Data = []byte(`{"amount": 1}`)
		out, err = b.proc.Process(ctx, projection.Batch{Events: []aggregate.Event{changed}})
		require.NoError(t, err)
		require.Equal(t, projection.Conflict, out[0].Outcome)
	})

	t.Run("BoundedMemory", func(t *testing.T) {
		t.Parallel()
		t.Run("inline", func(t *testing.T) { t.Parallel(); boundedMemory(t, genSetup(t), true) })
		t.Run("version-rows", func(t *testing.T) { t.Parallel(); boundedMemory(t, genSetupRows(t), false) })
	})

	t.Run("ResumesAfterEachPhase", func(t *testing.T) {
		t.Parallel()
		for _, phase := range []string{projection.PhaseReplay, projection.PhaseFinalize, projection.PhaseCatchUp, projection.PhaseVerify} {
			t.Run(phase, func(t *testing.T) {
				t.Parallel()
				b := genSetup(t)
				events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(21, 22)), 50, 6)
				stream := newGenStream(events, 20)
				ctx, cancel := context.WithCancel(t.Context())
				// The replay is cancelled as the stream hands over its third
				// batch of the phase: the first transaction (two batches of
				// 20, BatchSize 40) has committed its position. (Progress
				// reports are throttled: a fast replay may report once.)
				var inPhase atomic.Bool
				var handed atomic.Int32
				stream.onBatch = func(ctx context.Context, sb projection.StreamBatch) error {
					if phase == projection.PhaseReplay && inPhase.Load() && handed.Add(1) == 3 {
						cancel()
						return ctx.Err()
					}
					return nil
				}
				_, err := b.proc.Build(ctx, "ledger", &projection.BuildOptions{Stream: stream, BatchSize: 40,
					Progress: func(pr projection.BuildProgress) {
						if pr.Phase == phase {
							inPhase.Store(true)
							if phase != projection.PhaseReplay {
								cancel()
							}
						}
					}})
				require.ErrorIs(t, err, context.Canceled)
				stream.onBatch = nil
				require.Equal(t, map[int]string{1: projection.StateLive, 2: map[string]string{projection.PhaseReplay: projection.StateBuilding,
					projection.PhaseFinalize: projection.StateBuilding}[phase] + map[string]string{projection.PhaseCatchUp: projection.StateCatchUp,
					projection.PhaseVerify: projection.StateCatchUp}[phase]}, genStates(t, b.proc))
				res, err := b.proc.Build(t.Context(), "ledger", &projection.BuildOptions{Stream: stream, BatchSize: 40})
				require.NoError(t, err)
				require.True(t, res.Resumed)
				require.Equal(t, 2, res.Generation)
				require.Equal(t, genFold(t, events), genModel(t, b, genLive(t, b.proc).Schema))
				if phase == projection.PhaseReplay {
					require.Positive(t, stream.readFrom[len(stream.readFrom)-2], "the second run resumed the replay where it stopped")
				}
			})
		}
	})
}

// boundedMemory is TestBuildReplay/BoundedMemory on b, whose ledger is
// inline or not.
func boundedMemory(t *testing.T, b *genBundle, inline bool) {
	ctx := t.Context()

	events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(19, 20)), 200, 20)
	_, err := b.proc.Build(ctx, "ledger", &projection.BuildOptions{Stream: newGenStream(events, 100), BatchSize: 300, MaxAggregates: 50})
	require.NoError(t, err)
	live := genLive(t, b.proc)
	require.Equal(t, genFold(t, events), genModel(t, b, live.Schema))
	if inline {
		// Each payment's row logs its last 16 versions.
		require.EqualValues(t, 200, opCount(t, b.db, `SELECT count(*) FROM `+pgx.Identifier{live.Schema, "ledger_payments"}.Sanitize()+
			` WHERE version = 20 AND octet_length(inorder_log) = 16 * 8`))
	} else {
		// Logs of 20 versions: one full page in applied, 4 in the row.
		require.EqualValues(t, 200*16, opCount(t, b.db, `SELECT count(*) FROM applied WHERE projection = 'ledger@2'`))
		require.EqualValues(t, len(events), opCount(t, b.db, `SELECT count(*) FROM applied_log WHERE projection = 'ledger@2'`))
		require.EqualValues(t, 200, opCount(t, b.db, `SELECT count(*) FROM versions WHERE projection = 'ledger@2' AND version = 20 AND log_base = 16 AND cardinality(log_ids) = 4`))
	}
	out, err := b.proc.Process(ctx, projection.Batch{Events: events[:300]})
	require.NoError(t, err)
	requireEvery(t, projection.Duplicate, out)
}

func TestBuildConcurrency(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := genSetup(t)
	events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(23, 24)), 40, 4)
	stream := newGenStream(events, 10)
	// The first build holds in its replay until the others have asked.
	hold, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stream.onBatch = func(ctx context.Context, sb projection.StreamBatch) error {
		once.Do(func() {
			close(hold)
			<-release
		})
		return nil
	}
	other := genProcessor(t, b.db, ledger.New(nil)) // another process
	first := make(chan error, 1)
	go func() {
		_, err := b.proc.Build(ctx, "ledger", &projection.BuildOptions{Stream: stream})
		first <- err
	}()
	<-hold
	_, err := other.Build(ctx, "ledger", &projection.BuildOptions{Stream: stream})
	require.ErrorIs(t, err, projection.ErrBuildInProgress)
	require.Contains(t, err.Error(), "generation 2")
	waiting := make(chan projection.BuildResult, 1)
	noted := make(chan string, 1)
	go func() {
		res, err := other.Build(ctx, "ledger", &projection.BuildOptions{Stream: stream, Wait: true,
			Progress: func(pr projection.BuildProgress) {
				if pr.Note != "" {
					select {
					case noted <- pr.Note:
					default:
					}
				}
			}})
		if err != nil {
			t.Errorf("waiting build: %v", err)
		}
		waiting <- res
	}()
	require.Contains(t, <-noted, "waiting: generation 2")
	close(release)
	require.NoError(t, <-first)
	res := <-waiting
	require.True(t, res.AlreadyLive)
	require.Equal(t, 2, res.Generation)
	require.Equal(t, map[int]string{1: projection.StatePrevious, 2: projection.StateLive}, genStates(t, b.proc))
}

// TestBuildOperatorActions: after a switch to a new code version, operator
// actions act on the live generation, and a processor of the old version,
// which feeds only the previous one, refuses them (ErrNotFed).
func TestBuildOperatorActions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := genSetup(t)
	events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(41, 42)), 20, 3)
	v2 := genProcessor(t, b.db, ledgertest.V2{Projection: ledger.New(nil)})
	_, err := v2.Build(ctx, "ledger", &projection.BuildOptions{Stream: newGenStream(events, 25)})
	require.NoError(t, err)

	// An aggregate parked in both generations: version 1 missing.
	e2, err := aggregate.New("gap-1", 2, ledger.Approved, ledger.Data{})
	require.NoError(t, err)
	for _, p := range []*projection.Processor{b.proc, v2} {
		res, err := p.Process(ctx, projection.Batch{Events: []aggregate.Event{e2}})
		require.NoError(t, err)
		require.Equal(t, projection.Parked, res[0].Outcome)
	}
	err = acted(b.proc.DeclareGap(ctx, "ledger", "gap-1", 1, &projection.ActionOptions{Reason: "test"}))
	require.ErrorIs(t, err, projection.ErrNotFed)
	w, err := v2.Waiting(ctx, projection.ListOptions{Projection: "ledger"})
	require.NoError(t, err)
	require.Len(t, w, 1)
	require.Equal(t, "ledger", w[0].Projection)
	require.Equal(t, 2, w[0].Generation)
	all, err := v2.Waiting(ctx, projection.ListOptions{AllGenerations: true})
	require.NoError(t, err)
	require.Len(t, all, 2, "the aggregate waits in both generations")

	// The previous generation is named, and acted on by the processor that
	// feeds it (code version 1): a dry run first, which changes nothing.
	_, err = v2.DeclareGap(ctx, "ledger", "gap-1", 1, &projection.ActionOptions{Generation: 1, Reason: "test"})
	require.ErrorIs(t, err, projection.ErrNotFed, "generation 1 has code version 1")
	dry, err := b.proc.DeclareGap(ctx, "ledger", "gap-1", 1, &projection.ActionOptions{Generation: 1, DryRun: true, Reason: "test"})
	require.NoError(t, err)
	require.Equal(t, projection.ActionReport{Action: "declare-gap", Projection: "ledger", Generation: 1, Aggregate: "gap-1",
		Before: 0, After: 2, Drained: 1, Changed: true, DryRun: true, Reason: "test", Message: dry.Message}, dry)
	w, err = b.proc.Waiting(ctx, projection.ListOptions{Generation: 1})
	require.NoError(t, err)
	require.Len(t, w, 1, "a dry run changes nothing")
	rep, err := b.proc.DeclareGap(ctx, "ledger", "gap-1", 1, &projection.ActionOptions{Generation: 1, Reason: "test", By: "alice"})
	require.NoError(t, err)
	require.Equal(t, int64(2), rep.After)
	w, err = b.proc.Waiting(ctx, projection.ListOptions{Generation: 1})
	require.NoError(t, err)
	require.Empty(t, w, "repaired in generation 1")
	w, err = v2.Waiting(ctx, projection.ListOptions{})
	require.NoError(t, err)
	require.Len(t, w, 1, "and only there")
	log, err := b.proc.OperatorLog(ctx, projection.ListOptions{Action: "declare-gap"})
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Equal(t, 1, log[0].Generation)
	require.Equal(t, "alice", log[0].By)
}
