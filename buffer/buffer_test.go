package buffer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/buffer"
	"github.com/inorder/inorder/internal/pgtest"
)

func ev(agg string, v int64) aggregate.Event {
	return aggregate.Event{Aggregate: agg, Version: v, Type: "t", Data: []byte(fmt.Sprintf(`{"v":%d}`, v))}
}

func versions(ps []buffer.Parked) []int64 {
	out := []int64{}
	for _, p := range ps {
		out = append(out, p.Version)
	}
	return out
}

type bundle struct {
	db  *pgtest.DB
	buf *buffer.Buffer
}

func setup(t *testing.T) *bundle {
	db := pgtest.NewMigrated(t)
	return &bundle{db: db, buf: buffer.New(db.Schema)}
}

func (b *bundle) park(t *testing.T, projection string, events ...aggregate.Event) {
	t.Helper()
	hashes := make([][]byte, len(events))
	for i, e := range events {
		hashes[i] = e.Hash()
	}
	batch := &pgx.Batch{}
	b.buf.QueuePark(batch, projection, events, hashes)
	require.NoError(t, b.db.Pool.SendBatch(context.Background(), batch).Close())
}

// send sends a batch of the buffer's statements.
func (b *bundle) send(t *testing.T, queue func(*pgx.Batch)) {
	t.Helper()
	batch := &pgx.Batch{}
	queue(batch)
	require.NoError(t, b.db.Pool.SendBatch(context.Background(), batch).Close())
}

func (b *bundle) list(t *testing.T, f buffer.Filter) (out []buffer.Entry) {
	b.send(t, func(batch *pgx.Batch) { b.buf.QueueList(batch, f, func(es []buffer.Entry) { out = es }) })
	return out
}

func (b *bundle) waiting(t *testing.T, f buffer.Filter) (out []buffer.Waiting) {
	b.send(t, func(batch *pgx.Batch) { b.buf.QueueWaiting(batch, f, func(ws []buffer.Waiting) { out = ws }) })
	return out
}

func (b *bundle) stats(t *testing.T, projections ...string) (out []buffer.Stats) {
	b.send(t, func(batch *pgx.Batch) { b.buf.QueueStats(batch, projections, func(ss []buffer.Stats) { out = ss }) })
	return out
}

func (b *bundle) unmatched(t *testing.T, projection, other string) (n int64) {
	b.send(t, func(batch *pgx.Batch) { b.buf.QueueUnmatched(batch, projection, other, func(got int64) { n = got }) })
	return n
}

func (b *bundle) load(t *testing.T, projection string, aggs ...string) []buffer.Parked {
	t.Helper()
	var out []buffer.Parked
	batch := &pgx.Batch{}
	b.buf.QueueLoad(batch, projection, aggs, func(ps []buffer.Parked) { out = ps })
	require.NoError(t, b.db.Pool.SendBatch(context.Background(), batch).Close())
	return out
}

func TestParkLoadDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	require.Equal(t, b.db.Schema, b.buf.Schema())

	b.park(t, "p1", ev("a", 5), ev("a", 3), ev("b", 2))
	b.park(t, "p1", ev("a", 3)) // idempotent
	changed := ev("a", 5)
	changed.Data = []byte(`{"other":true}`)
	b.park(t, "p1", changed) // the first parked copy stays
	b.park(t, "p2", ev("a", 4))

	got := b.load(t, "p1", "a", "b", "c")
	require.Equal(t, []int64{3, 5, 2}, versions(got))
	require.Equal(t, "a", got[0].Aggregate)
	require.Equal(t, ev("a", 5).Data, got[1].Data)
	require.Equal(t, ev("a", 5).Hash(), got[1].Hash)
	require.Equal(t, "a:5", got[1].StableID())
	require.WithinDuration(t, time.Now(), got[0].ParkedAt, time.Minute)

	batch := &pgx.Batch{}
	b.buf.QueueDelete(batch, "p1", []string{"a", "b"}, []int64{3, 2})
	require.NoError(t, b.db.Pool.SendBatch(ctx, batch).Close())
	require.Equal(t, []int64{5}, versions(b.load(t, "p1", "a", "b")))
	require.Equal(t, []int64{4}, versions(b.load(t, "p2", "a")))
}

func TestOperatorViews(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.park(t, "p1", ev("a", 5), ev("a", 6))
	b.park(t, "p1", ev("b", 3))
	b.park(t, "p2", ev("z", 9))
	_, err := b.db.Pool.Exec(ctx, `UPDATE parked SET parked_at = now() - interval '1 hour' WHERE aggregate = 'a'`)
	require.NoError(t, err)

	entries := b.list(t, buffer.Filter{Include: []string{"p1"}})
	require.Len(t, entries, 3)
	require.Equal(t, "a", entries[0].Aggregate, "oldest first")
	require.EqualValues(t, 5, entries[0].Version)

	w := b.waiting(t, buffer.Filter{Include: []string{"p1"}})
	require.Len(t, w, 2)
	require.Equal(t, "a", w[0].Aggregate)
	require.EqualValues(t, 2, w[0].Count)
	require.EqualValues(t, 5, w[0].MinVersion)
	require.EqualValues(t, 6, w[0].MaxVersion)

	old := b.waiting(t, buffer.Filter{OlderThan: 30 * time.Minute})
	require.Len(t, old, 1)
	require.Equal(t, "a", old[0].Aggregate)

	one := b.waiting(t, buffer.Filter{Aggregate: "b"})
	require.Len(t, one, 1)
	require.EqualValues(t, 3, one[0].MinVersion)

	stats := b.stats(t)
	require.Len(t, stats, 2)
	require.Equal(t, "p1", stats[0].Projection)
	require.EqualValues(t, 3, stats[0].Events)
	require.EqualValues(t, 2, stats[0].Aggregates)
	require.WithinDuration(t, time.Now().Add(-time.Hour), stats[0].Oldest, time.Minute)
	some := b.stats(t, "p2", "p3")
	require.Len(t, some, 1)
	require.Equal(t, "p2", some[0].Projection)
	require.EqualValues(t, 1, some[0].Events)

	limited := b.list(t, buffer.Filter{Limit: 1})
	require.Len(t, limited, 1)
	excluded := b.waiting(t, buffer.Filter{Exclude: []string{"p1"}})
	require.Len(t, excluded, 1)
	require.Equal(t, "p2", excluded[0].Projection)
	masked := b.list(t, buffer.Filter{Include: []string{"p2"}, OmitPayloads: true})
	require.Len(t, masked, 1)
	require.Nil(t, masked[0].Data)
	require.NotNil(t, entries[0].Data)
}

func TestLoadKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.park(t, "p1", ev("a", 5), ev("a", 7), ev("b", 3))
	var got []buffer.Parked
	batch := &pgx.Batch{}
	b.buf.QueueLoadKeys(batch, "p1", []string{"a", "a", "b", "c"}, []int64{5, 6, 3, 1}, func(ps []buffer.Parked) { got = ps })
	require.NoError(t, b.db.Pool.SendBatch(context.Background(), batch).Close())
	require.Len(t, got, 2)
	require.Equal(t, []int64{5, 3}, versions(got))
	require.Equal(t, "a:5", got[0].StableID())
	require.Equal(t, ev("a", 5).Hash(), got[0].Hash)
	require.Nil(t, got[0].Data, "keys only")
}

func TestClearAndUnmatched(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.park(t, "p1", ev("a", 5), ev("a", 6), ev("b", 3))
	b.park(t, "p1@2", ev("a", 5), ev("b", 4))
	require.EqualValues(t, 1, b.unmatched(t, "p1@2", "p1"), "b:4 is parked in p1@2 only")
	require.EqualValues(t, 2, b.unmatched(t, "p1", "p1@2"), "a:6 and b:3 are parked in p1 only")

	batch := &pgx.Batch{}
	b.buf.QueueClear(batch, "p1")
	require.NoError(t, b.db.Pool.SendBatch(ctx, batch).Close())
	require.Empty(t, b.load(t, "p1", "a", "b"))
	require.Equal(t, []int64{5, 4}, versions(b.load(t, "p1@2", "a", "b")))
}
