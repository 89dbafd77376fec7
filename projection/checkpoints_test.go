package projection_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
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
