package projection_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// TestStateMemory: a processor plans from its memory of the version rows
// and the parked events its commits left (statecache.go), checks it in
// every transaction, and reads the rows back when another processor moved
// them. Two processors on one schema take turns on ten aggregates of a
// journal (version rows): A parks, applies and drains from its memory; B
// moves half of the aggregates under it; A's next batches find the
// memory stale — once where the plan writes the rows (the compare-and-set),
// once where every delivery is a duplicate (the read-back check) — retry
// reading, and the journal ends as the stream applied in order, once. A
// batch whose duplicates the memory classifies rightly passes its check.
func TestStateMemory(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	a := opProcessor(t, db, opConfig(), opJournal{"journal"})
	b := opProcessor(t, db, opConfig(), opJournal{"journal"})
	aggs := make([]string, 10)
	for i := range aggs {
		aggs[i] = fmt.Sprintf("m%d", i)
	}
	version := func(v int64, of []string) []aggregate.Event {
		var evs []aggregate.Event
		for _, agg := range of {
			evs = append(evs, opNotes(agg, v, v)...)
		}
		return evs
	}
	var all []aggregate.Event
	process := func(proc *projection.Processor, evs []aggregate.Event, want projection.Outcome, what string) {
		t.Helper()
		res, err := proc.Process(ctx, projection.Batch{Events: evs})
		require.NoError(t, err, what)
		for i, o := range outcomes(res) {
			require.Equal(t, want, o, "%s: %s version %d", what, evs[i].Aggregate, evs[i].Version)
		}
		all = append(all, evs...)
	}
	memory := func(proc *projection.Processor) (int64, int64) {
		hits, misses, _ := projection.Memory(proc)
		return hits, misses
	}

	process(a, version(3, aggs), projection.Parked, "A parks version 3")
	process(a, version(1, aggs), projection.Applied, "A applies version 1")
	hits, misses := memory(a)
	require.Equal(t, int64(10), hits, "A's second batch planned from its memory")
	require.Zero(t, misses)
	process(a, version(2, aggs[:5]), projection.Applied, "A applies version 2 and drains 3 from its memory")
	require.Equal(t, [][]int64{{1, 2, 3}}, [][]int64{opJournalModel(t, db, "journal")["m0"]})
	hits, misses = memory(a)
	require.Equal(t, int64(15), hits)
	require.Zero(t, misses)

	// Duplicates only: B applies version 4 of m0..m4; A's redelivery of
	// version 2 there writes nothing, and its check reads the rows back and
	// finds them moved.
	process(b, version(4, aggs[:5]), projection.Applied, "B applies version 4 of m0..m4")
	process(a, version(2, aggs[:5]), projection.Duplicate, "A's redelivery of version 2")
	hits, misses = memory(a)
	require.Equal(t, int64(1), misses, "the read-back check found A's memory stale")

	// After a miss the memory stays off for a few batches, then A plans
	// from what it read.
	for v := int64(1); v <= 8; v++ {
		process(a, opNotes("other", v, v), projection.Applied, "A's batches of another aggregate")
	}
	h, _ := memory(a)
	require.Equal(t, hits, h, "no batch planned from the memory right after a miss")
	process(a, version(2, aggs[:5]), projection.Duplicate, "A's second redelivery of version 2")
	hits, misses = memory(a)
	require.Equal(t, h+5, hits, "the memory is on again")
	require.Equal(t, int64(1), misses, "and right")

	// B moves m5..m9 on: version 2 drains version 3 there. A's memory of
	// them is stale: version 4 is planned as parked there, and the
	// compare-and-set refuses it.
	process(b, version(2, aggs[5:]), projection.Applied, "B applies version 2 of m5..m9")
	process(a, version(4, aggs[5:]), projection.Applied, "A applies version 4 after a stale memory")
	hits, misses = memory(a)
	require.Equal(t, int64(2), misses, "the compare-and-set found A's memory stale")
	require.Equal(t, int64(2), a.Counts()["journal"].StaleMemory, "Counts reports the misses")
	require.Zero(t, b.Counts()["journal"].StaleMemory, "B read its rows: no memory, no miss")

	// And on: a shuffled stream with copies, through both processors.
	var rest []aggregate.Event
	for _, agg := range aggs {
		rest = append(rest, opNotes(agg, 5, 40)...)
	}
	rest = opShuffle(7, append(rest, rest[:20]...))
	for i := 0; i < len(rest); i += 16 {
		proc := a
		if i/16%3 == 2 {
			proc = b
		}
		evs := rest[i:min(i+16, len(rest))]
		_, err := proc.Process(ctx, projection.Batch{Events: evs})
		require.NoError(t, err)
		all = append(all, evs...)
	}
	hits2, _ := memory(a)
	require.Greater(t, hits2, hits, "A kept planning from its memory")
	require.Equal(t, opJournalFold(all), opJournalModel(t, db, "journal"), "the journal is the stream applied in order, once")
	require.Zero(t, opCount(t, db, `SELECT count(*) FROM `+db.Schema+`.parked`), "nothing left parked")
}

// TestStateMemoryInline: a processor with an inline projection locks its
// version rows (the global lock order) and so reads them, but takes the
// parked events of the rows it finds exactly as remembered from its memory.
// Two processors of an inline projection that records the versions it is
// given, in order, take turns on a shuffled stream with copies: the
// parked events of most aggregates come from the memory, and every row ends
// with its versions applied in order, once.
func TestStateMemoryInline(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	a := opProcessor(t, db, opConfig(), orderLog{})
	b := opProcessor(t, db, opConfig(), orderLog{})
	var evs []aggregate.Event
	for i := range 20 {
		evs = append(evs, opNotes(fmt.Sprintf("i%d", i), 1, 12)...)
	}
	evs = opShuffle(11, append(evs, evs[:40]...))
	for i := 0; i < len(evs); i += 20 {
		proc := a
		if i/20%4 == 3 {
			proc = b
		}
		_, err := proc.Process(ctx, projection.Batch{Events: evs[i:min(i+20, len(evs))]})
		require.NoError(t, err)
	}
	require.Positive(t, projection.ParkedRemembered(a), "A took parked events from its memory")
	require.Zero(t, opCount(t, db, `SELECT count(*) FROM order_log WHERE applied <> '1,2,3,4,5,6,7,8,9,10,11,12,'`), "rows not at versions 1 to 12 in order")
	require.Equal(t, int64(20), opCount(t, db, `SELECT count(*) FROM order_log`))
	require.Zero(t, opCount(t, db, `SELECT count(*) FROM `+db.Schema+`.parked`), "nothing left parked")
}
