package pgtable_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/source/pgtable"
)

// bundle is a test's schema (inorder's tables, the events table among
// them) with a ledger processor.
type bundle struct {
	*ledgertest.Bundle
	w *pgtable.Writer
}

func setup(t *testing.T) *bundle {
	t.Helper()
	l := ledgertest.New(t)
	return &bundle{Bundle: l, w: pgtable.NewWriter(l.DB.Schema, nil)}
}

// run runs s until the test ends, and returns a function that stops it
// gracefully and requires Run's nil.
func run(t *testing.T, s *pgtable.Source) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cancel()
			<-done
		}
	})
	return func() {
		stopped = true
		cancel()
		require.NoError(t, <-done)
	}
}

// waitFor polls cond every 10 ms until it holds or a minute passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, time.Minute, 10*time.Millisecond, what)
}

// Each partition's checkpoint reaches the last row of the partition while
// the source runs (the batches' own, and the saves of the watermarks that
// batches committing out of order leave behind), and the drain saves them
// all: a restart reads nothing again.
func TestCheckpointsFollowCommits(t *testing.T) {
	t.Parallel()
	for _, parts := range []int{16, 4} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) {
			t.Parallel()
			checkpointsFollowCommits(t, parts)
		})
	}
}

func checkpointsFollowCommits(t *testing.T, parts int) {
	b := setup(t)
	events := ledger.Generate(rand.New(rand.NewPCG(1, 2)), 60, 5)
	for _, e := range events { // a transaction each
		require.NoError(t, b.w.Append(t.Context(), b.DB.Pool, e))
	}
	s, err := pgtable.New(&pgtable.Config{Pool: b.DB.Pool, Processor: b.Proc, Workers: 4, BatchSize: 10, Partitions: parts,
		MaxWait: time.Millisecond, CheckpointEvery: 10 * time.Millisecond, LeaseEvery: 50 * time.Millisecond})
	require.NoError(t, err)
	stop := run(t, s)
	waitFor(t, "every event applied", func() bool { return b.AppliedVersions(t) == len(events) })
	last := func() map[string]string {
		rows, err := b.DB.Pool.Query(t.Context(), `SELECT DISTINCT ON (p) 'postgres/' || p, format('T:%s/S:%s', lpad(txid::text, 20, '0'), lpad(seq::text, 20, '0'))
FROM (SELECT mod(hashtext(aggregate) & 2147483647, $1) AS p, txid, seq FROM events) e ORDER BY p, txid DESC, seq DESC`, parts)
		require.NoError(t, err)
		out := map[string]string{}
		for rows.Next() {
			var k, v string
			require.NoError(t, rows.Scan(&k, &v))
			out[k] = v
		}
		return out
	}()
	saved := func() map[string]string {
		cps, err := b.Proc.Checkpoints(t.Context())
		require.NoError(t, err)
		out := map[string]string{}
		for _, c := range cps {
			out[c.Name] = string(c.Position)
		}
		return out
	}
	waitFor(t, "each partition's checkpoint at its last row", func() bool { return fmt.Sprint(saved()) == fmt.Sprint(last) })
	stop()
	require.Equal(t, last, saved())
	b.RequireFold(t, events)
}

// Every batch says it is exclusive (projection.Batch.Exclusive): a
// partition is a part of the aggregate space that one process reads at a
// time.
func TestBatchesAreExclusive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proc, marks := b.MarkedProcessor(t)
	events := ledger.Generate(rand.New(rand.NewPCG(1, 3)), 40, 4)
	require.NoError(t, b.w.Append(t.Context(), b.DB.Pool, events...))
	s, err := pgtable.New(&pgtable.Config{Pool: b.DB.Pool, Processor: proc, Workers: 2, BatchSize: 10, MaxWait: time.Millisecond})
	require.NoError(t, err)
	stop := run(t, s)
	waitFor(t, "every event applied", func() bool { return b.AppliedVersions(t) == len(events) })
	stop()
	b.RequireFold(t, events)
	marks.RequireMarked(t, true)
}
