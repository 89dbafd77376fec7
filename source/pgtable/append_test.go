package pgtable_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/source/pgtable"
)

func ev(agg string, v int64, data string) aggregate.Event {
	return aggregate.Event{Aggregate: agg, Version: v, Type: "noted", Data: []byte(data)}
}

func TestAppend(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	count := func() int {
		var n int
		require.NoError(t, b.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n))
		return n
	}
	require.NoError(t, b.w.Append(ctx, b.DB.Pool, ev("a", 1, `{"n": 1}`), ev("a", 2, `{"n":2}`), ev("b", 1, `{}`)))
	require.Equal(t, 3, count())

	var conflict *pgtable.VersionConflictError
	t.Run("TakenVersion", func(t *testing.T) {
		err := b.w.Append(ctx, b.DB.Pool, ev("a", 2, `{"other":true}`))
		require.ErrorIs(t, err, pgtable.ErrVersionConflict)
		require.ErrorAs(t, err, &conflict)
		require.Equal(t, pgtable.VersionConflictError{Aggregate: "a", Version: 2, Current: 2}, *conflict)
	})
	t.Run("Gap", func(t *testing.T) {
		err := b.w.Append(ctx, b.DB.Pool, ev("b", 1, `{}`), ev("c", 2, `{}`))
		require.ErrorAs(t, err, &conflict)
		require.Equal(t, "c", conflict.Aggregate)
		require.Equal(t, 3, count(), "nothing of the call written")
	})
	t.Run("NotConsecutive", func(t *testing.T) {
		require.ErrorIs(t, b.w.Append(ctx, b.DB.Pool, ev("d", 1, `{}`), ev("d", 3, `{}`)), pgtable.ErrVersionConflict)
	})
	t.Run("IdempotentRetry", func(t *testing.T) {
		// The same events again, and one more: the copies are left as they
		// are, the new one appended; the payload is kept byte for byte.
		require.NoError(t, b.w.Append(ctx, b.DB.Pool, ev("a", 2, `{"n":2}`), ev("a", 3, `{"n":  3}`)))
		require.Equal(t, 4, count())
		var data string
		require.NoError(t, b.DB.Pool.QueryRow(ctx, `SELECT data::text FROM events WHERE aggregate = 'a' AND version = 3`).Scan(&data))
		require.Equal(t, `{"n":  3}`, data)
	})
	t.Run("Invalid", func(t *testing.T) {
		var verr *aggregate.ValidationError
		require.ErrorAs(t, b.w.Append(ctx, b.DB.Pool, ev("", 1, `{}`)), &verr)
		require.ErrorIs(t, b.w.Append(ctx, b.DB.Pool, ev("e", 1, `{nope`)), aggregate.ErrInvalidJSON)
	})
	t.Run("InTransaction", func(t *testing.T) {
		tx, err := b.DB.Pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, b.w.Append(ctx, tx, ev("f", 1, `{}`)))
		require.NoError(t, tx.Rollback(ctx))
		require.Equal(t, 4, count(), "rolled back with the transaction")
	})
}

// Writers racing for the same next version: exactly one of them appends it,
// the others get a version conflict.
func TestAppendConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	require.NoError(t, b.w.Append(ctx, b.DB.Pool, ev("race", 1, `{}`)))
	const writers = 8
	for v := int64(2); v <= 6; v++ {
		var wg sync.WaitGroup
		errs := make([]error, writers)
		for i := range writers {
			wg.Go(func() {
				tx, err := b.DB.Pool.Begin(ctx)
				if err != nil {
					errs[i] = err
					return
				}
				defer func() { _ = tx.Rollback(ctx) }()
				if errs[i] = b.w.Append(ctx, tx, ev("race", v, `{"writer":`+string(rune('0'+i))+`}`)); errs[i] == nil {
					time.Sleep(time.Millisecond) // hold the row a little, so the others meet it
					errs[i] = tx.Commit(ctx)
				}
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, pgtable.ErrVersionConflict):
				t.Fatalf("v%d: %v", v, err)
			}
		}
		require.Equal(t, 1, won, "v%d: one writer appends it", v)
	}
	var n int
	require.NoError(t, b.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE aggregate = 'race'`).Scan(&n))
	require.Equal(t, 6, n)
}

// A commit wakes the readers through LISTEN/NOTIFY: with polling all but
// off (an hour), an appended event still reaches the read model.
func TestNotifyWakesReaders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s, err := pgtable.New(&pgtable.Config{Pool: b.DB.Pool, Processor: b.Proc, PollInterval: time.Hour, MaxWait: time.Millisecond})
	require.NoError(t, err)
	stop := run(t, s)
	events := ledger.Generate(rand.New(rand.NewPCG(3, 3)), 1, 3) // one payment: one partition
	require.NoError(t, b.w.Append(t.Context(), b.DB.Pool, events[0]))
	waitFor(t, "the first event applied", func() bool { return b.AppliedVersions(t) == 1 })
	// Its partition's reader has read it and waits: what comes now, only a
	// notification can bring.
	for _, e := range events[1:] {
		require.NoError(t, b.w.Append(t.Context(), b.DB.Pool, e))
		waitFor(t, "the next event applied without a poll", func() bool { return b.AppliedVersions(t) == int(e.Version) })
	}
	stop()
	b.RequireFold(t, events)
}
