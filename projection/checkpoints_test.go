package projection_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// TestBatchCheckpoints stores several positions with one batch: each one
// moves forward only, and together they commit with the batch.
func TestBatchCheckpoints(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	proc := opProcessor(t, db, nil, ledger.New(nil))

	e, err := aggregate.New("pay-1", 1, ledger.Authorized, ledger.Data{Payer: "a", Payee: "b", Amount: 1})
	require.NoError(t, err)
	_, err = proc.Process(ctx, projection.Batch{Events: []aggregate.Event{e},
		Checkpoint:  &projection.Checkpoint{Name: "c", Position: projection.Position("0001")},
		Checkpoints: []projection.Checkpoint{{Name: "b", Position: projection.Position("0002")}, {Name: "a", Position: projection.Position("0004")}}})
	require.NoError(t, err)
	_, err = proc.Process(ctx, projection.Batch{Events: []aggregate.Event{e},
		Checkpoints: []projection.Checkpoint{{Name: "b", Position: projection.Position("0003")}, {Name: "a", Position: projection.Position("0003")}}})
	require.NoError(t, err)
	for name, want := range map[string]string{"a": "0004", "b": "0003", "c": "0001"} {
		got, ok, err := proc.LoadCheckpoint(ctx, name)
		require.NoError(t, err)
		require.True(t, ok, name)
		require.Equal(t, want, string(got), name)
	}
	_, err = proc.Process(ctx, projection.Batch{Events: []aggregate.Event{e},
		Checkpoints: []projection.Checkpoint{{Name: "a", Position: projection.Position("0009")}, {Name: "", Position: projection.Position("0009")}}})
	require.ErrorContains(t, err, "empty name")
	got, _, err := proc.LoadCheckpoint(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "0004", string(got), "a batch that failed stores none of its checkpoints")
}

// TestBatchCheckpointsNoDeadlock commits batches at once whose checkpoints
// name the same rows in different orders (a Kafka source's partitions):
// written in name order, no transaction ever waits for a deadlock to be
// detected and retried.
func TestBatchCheckpointsNoDeadlock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	var attempts atomic.Int64
	proc := opProcessor(t, db, &projection.Config{OnBatch: func(bi projection.BatchInfo) { attempts.Add(int64(bi.Attempts - 1)) }}, ledger.New(nil))
	const workers, batches, rows = 6, 10, 8
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range batches {
				// Accounts of its own: the batches share no read-model row.
				e, err := aggregate.New(fmt.Sprintf("pay-%d-%d", w, i), 1, ledger.Authorized,
					ledger.Data{Payer: fmt.Sprintf("a-%d-%d", w, i), Payee: fmt.Sprintf("b-%d-%d", w, i), Amount: 1})
				if !assertNoError(t, err) {
					return
				}
				var cps []projection.Checkpoint
				for _, r := range rng.Perm(rows) {
					cps = append(cps, projection.Checkpoint{Name: fmt.Sprintf("part-%02d", r), Position: projection.Position(fmt.Sprintf("%06d", i*workers+w))})
				}
				_, err = proc.Process(ctx, projection.Batch{Events: []aggregate.Event{e}, Checkpoints: cps,
					// Hold the rows' locks a moment, so transactions queue on them.
					BeforeCommit: func(ctx context.Context, tx pgx.Tx) error {
						_, err := tx.Exec(ctx, `SELECT pg_sleep(0.01)`)
						return err
					}})
				if !assertNoError(t, err) {
					return
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, attempts.Load(), "transactions retried: deadlocks on the checkpoint rows")
	for r := range rows {
		got, _, err := proc.LoadCheckpoint(ctx, fmt.Sprintf("part-%02d", r))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("%06d", workers*batches-1), string(got))
	}
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	return !assertFailed(t, err)
}

func assertFailed(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return true
	}
	return false
}

// TestCheckpointFeedingTwoGenerations commits checkpointed batches through
// the processors a processor derives: while a side-by-side rebuild holds
// its generation in catch-up, a live batch of the same code version feeds
// both generations, and a worker of the new code version feeds the new one
// alone (both through the processor of the generations' view); each stores
// its checkpoint with its work. The processors a rebuild replays through
// (in place and side by side) store a batch's checkpoint too.
func TestCheckpointFeedingTwoGenerations(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	requireCheckpoint := func(proc *projection.Processor, name string, want projection.Position) {
		t.Helper()
		got, ok, err := proc.LoadCheckpoint(ctx, name)
		require.NoError(t, err)
		require.True(t, ok, name)
		require.Equal(t, string(want), string(got), name)
	}
	late, err := aggregate.New("late-1", 1, ledger.Authorized, ledger.Data{Payer: "a", Payee: "b", Amount: 5})
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		// build builds generation 2, batches feeds the live batch.
		build, batches func(b *genBundle) *projection.Processor
		fed            map[int]bool // the generations the batch feeds
	}{
		{"same code version", func(b *genBundle) *projection.Processor { return b.proc },
			func(b *genBundle) *projection.Processor { return b.proc }, map[int]bool{1: true, 2: true}},
		{"new code version", func(b *genBundle) *projection.Processor {
			return genProcessor(t, b.db, ledgertest.V2{Projection: ledger.New(nil)})
		},
			nil, map[int]bool{2: true}},
	} {
		b := genSetup(t)
		events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(41, 42)), 20, 4)
		stream := newGenStream(events, 25)
		builder := c.build(b)
		feeder := builder
		if c.batches != nil {
			feeder = c.batches(b)
		}
		ready := make(chan struct{})
		var once sync.Once
		built := make(chan error, 1)
		go func() {
			_, err := builder.Build(ctx, "ledger", &projection.BuildOptions{Stream: stream, Hold: true, Progress: func(pr projection.BuildProgress) {
				if pr.Phase == projection.PhaseReady {
					once.Do(func() { close(ready) })
				}
			}})
			built <- err
		}()
		select {
		case <-ready:
		case err := <-built:
			t.Fatalf("%s: the build ended before it was ready: %v", c.name, err)
		}
		require.Equal(t, map[int]string{1: projection.StateLive, 2: projection.StateCatchUp}, genStates(t, b.proc), c.name)

		res, err := feeder.Process(ctx, projection.Batch{Events: []aggregate.Event{late},
			Checkpoint: &projection.Checkpoint{Name: "live", Position: genPos(len(events) + 1)}})
		require.NoError(t, err, "%s: a checkpointed batch through the generations' view", c.name)
		require.Equal(t, projection.Applied, res[0].Outcome, c.name)
		requireCheckpoint(b.proc, "live", genPos(len(events)+1))
		// Appended once the batch committed: the rebuild's catch-up, reading
		// the stream meanwhile, finds it applied.
		stream.Append(late)

		require.NoError(t, builder.Switch(ctx, "ledger", 2, "test"), c.name)
		require.NoError(t, <-built, c.name)
		withLate := genFold(t, append(slices.Clone(events), late))
		require.Equal(t, withLate, genModel(t, b, genLive(t, b.proc).Schema), c.name)
		if c.fed[1] {
			require.Equal(t, withLate, genModel(t, b, ""), c.name)
		} else {
			require.Equal(t, genFold(t, events), genModel(t, b, ""), c.name)
		}
	}

	// The replays' processor (side by side and in place alike).
	db := pgtest.NewMigrated(t)
	proc := opProcessor(t, db, nil, ledger.New(nil))
	for i, derived := range []*projection.Processor{projection.GenProcessor(proc, "ledger")} {
		e, err := aggregate.New(fmt.Sprintf("pay-%d", i), 1, ledger.Authorized, ledger.Data{Payer: "a", Payee: "b", Amount: 1})
		require.NoError(t, err)
		name := fmt.Sprintf("replay-%d", i)
		res, err := derived.Process(ctx, projection.Batch{Events: []aggregate.Event{e},
			Checkpoint: &projection.Checkpoint{Name: name, Position: projection.Position("0001")}})
		require.NoError(t, err, name)
		require.Equal(t, projection.Applied, res[0].Outcome, name)
		requireCheckpoint(proc, name, projection.Position("0001"))
	}
}
