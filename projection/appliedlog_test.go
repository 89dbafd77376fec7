package projection_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/projection/projectiontest"
)

// TestAppliedLogPages covers the applied log kept in the version rows (see
// migrations/sql/002_applied_in_versions.up.sql): pages of 16 entries that
// move to the applied table as an aggregate grows. Long aggregates are
// applied in order (speculative writes), shuffled (parked and drained), cut
// short by a failing handler, and advanced by operators; each time the
// applied log must hold every applied version once, with its id — default
// ids and ids that need quoting in an array literal — and hash, and stale
// redeliveries must be told apart: duplicates, or conflicts that name the
// applied event's id, in the row's page and in the applied table alike.
func TestAppliedLogPages(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const versions = 70
	journalEvents := func(agg string, id func(v int64) string) []aggregate.Event {
		var es []aggregate.Event
		for v := int64(1); v <= versions; v++ {
			es = append(es, aggregate.Event{Aggregate: agg, Version: v, ID: id(v), Type: "journal.entry",
				Data: []byte(fmt.Sprintf(`{"n": %d}`, v))})
		}
		return es
	}
	noID := func(int64) string { return "" }
	oddID := func(v int64) string { return fmt.Sprintf(`id "%d" \ {x,y} NULL`, v) }
	mixedID := func(v int64) string {
		if v%3 == 0 {
			return fmt.Sprintf("c-%d", v)
		}
		return ""
	}
	fault := newOpFault("d", 20)
	fault.on.Store(false)
	db := pgtest.NewMigrated(t)
	proc := opProcessor(t, db, opConfig(), opFaultyBatch{opJournal{"journal"}, fault})
	process := func(events ...aggregate.Event) []projection.Outcome {
		t.Helper()
		res, err := proc.Process(ctx, projection.Batch{Events: events})
		require.NoError(t, err)
		return outcomes(res)
	}
	// requireLog requires the applied log to hold exactly events, with
	// their stable ids and hashes, and no page to hold more than maxPage
	// entries (16 plus the longest run written at once).
	requireLog := func(maxPage int, events []aggregate.Event) {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `SELECT aggregate || ' v' || version, event_id || ' ' || encode(hash, 'hex') FROM applied_log WHERE projection = 'journal'`)
		require.NoError(t, err)
		got := map[string]string{}
		var k, v string
		_, err = pgx.ForEachRow(rows, []any{&k, &v}, func() error {
			require.NotContains(t, got, k, "a version twice in the applied log")
			got[k] = v
			return nil
		})
		require.NoError(t, err)
		want := map[string]string{}
		for _, e := range events {
			want[fmt.Sprintf("%s v%d", e.Aggregate, e.Version)] = fmt.Sprintf("%s %x", e.StableID(), e.Hash())
		}
		require.Equal(t, want, got)
		var fullest int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(max(cardinality(log_ids)), 0) FROM versions
WHERE projection = 'journal' AND cardinality(log_ids) = version - log_base AND octet_length(log_hashes) = 16 * cardinality(log_ids)`).Scan(&fullest))
		require.LessOrEqual(t, fullest, maxPage, "a page holds at most 16 entries plus one run")
		var broken int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM versions WHERE projection = 'journal'
AND (cardinality(log_ids) <> version - log_base OR octet_length(log_hashes) <> 16 * cardinality(log_ids))`).Scan(&broken))
		require.Zero(t, broken, "version rows whose log does not cover log_base+1 … version")
	}
	// requireStale redelivers events, with a changed payload at changed
	// versions: the others are duplicates, those conflicts naming the
	// applied event's id.
	requireStale := func(events []aggregate.Event, changed ...int64) {
		t.Helper()
		batch := slices.Clone(events)
		want := make([]projection.Outcome, len(batch))
		for i := range batch {
			want[i] = projection.Duplicate
			if slices.Contains(changed, batch[i].Version) {
				batch[i].Data = []byte(`{"changed": true}`)
				want[i] = projection.Conflict
			}
		}
		require.Equal(t, want, process(batch...))
		for _, v := range changed {
			var existing, state string
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT existing_event_id, existing_state FROM conflicts WHERE aggregate = $1 AND version = $2`,
				events[0].Aggregate, v).Scan(&existing, &state))
			require.Equal(t, "applied", state)
			require.Equal(t, events[v-1].StableID(), existing)
		}
	}

	// In order, 5 versions a batch: the writes skip the read.
	a := journalEvents("a", noID)
	s0, _ := projection.Speculation(proc)
	for chunk := range slices.Chunk(a, 5) {
		process(chunk...)
	}
	s1, m1 := projection.Speculation(proc)
	require.EqualValues(t, versions/5, s1-s0, "in-order batches speculate")
	require.Zero(t, m1)
	requireLog(16+5, a)
	requireStale(a, 3, 40, 69) // spilled to applied (3, 40) and in the row's page (69)

	// Shuffled, several aggregates and random batches: parked, then drained
	// in long runs that cross pages.
	b, c := journalEvents("b", oddID), journalEvents("c", mixedID)
	mixed := append(slices.Clone(b), c...)
	rng := rand.New(rand.NewPCG(70, 1))
	rng.Shuffle(len(mixed), func(i, j int) { mixed[i], mixed[j] = mixed[j], mixed[i] })
	for len(mixed) > 0 {
		n := min(1+rng.IntN(25), len(mixed))
		process(mixed[:n]...)
		mixed = mixed[n:]
	}
	requireLog(versions, slices.Concat(a, b, c))
	requireStale(b, 1, 17, 70)
	requireStale(c, 3, 33, 64)

	// Cut short: version 20 of d fails for good, in a batch of 1…30; the
	// log must not keep the planned entries of 20…30. Then the operator's
	// retry applies 20…30 (its entries go to the applied table).
	d := journalEvents("d", noID)[:30]
	fault.on.Store(true)
	got := process(d...)
	require.Equal(t, projection.Quarantined, got[19])
	requireLog(versions, slices.Concat(a, b, c, d[:19]))
	fault.on.Store(false)
	require.NoError(t, acted(proc.RetryQuarantined(ctx, "journal", "d", nil)))
	requireLog(versions, slices.Concat(a, b, c, d))
	require.Equal(t, slices.Repeat([]projection.Outcome{projection.Applied}, 5), process(journalEvents("d", noID)[30:35]...))
	requireLog(versions, slices.Concat(a, b, c, journalEvents("d", noID)[:35]))
	requireStale(journalEvents("d", noID)[:35], 10, 25, 33)

	// A declared gap: the skipped versions are not in the log, and one that
	// turns up after all is a conflict with the "skipped" state.
	e := journalEvents("e", noID)
	process(e[:18]...)
	require.NoError(t, acted(proc.DeclareGap(ctx, "journal", "e", 22, &projection.ActionOptions{Reason: "lost at the source"})))
	process(e[22:40]...)
	requireLog(versions, slices.Concat(a, b, c, journalEvents("d", noID)[:35], e[:18], e[22:40]))
	require.Equal(t, []projection.Outcome{projection.Conflict, projection.Duplicate}, process(e[20], e[30]))
	var state string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT existing_state FROM conflicts WHERE aggregate = 'e' AND version = 21`).Scan(&state))
	require.Equal(t, "skipped", state)
	require.Equal(t, append(rangeOf(1, 18), rangeOf(23, 40)...), opJournalModel(t, db, "journal")["e"])
}

// TestAppliedLogPagesConcurrently delivers long aggregates, in order, in
// chunks that cross pages, from many goroutines at once, each goroutine
// every chunk: the writers race to move the same pages to the applied
// table, and every version must still be applied once and logged once.
func TestAppliedLogPagesConcurrently(t *testing.T) {
	t.Parallel()
	for round := range 4 {
		t.Run(fmt.Sprintf("round=%d", round), func(t *testing.T) {
			t.Parallel()
			appliedLogPagesConcurrently(t)
		})
	}
}

func appliedLogPagesConcurrently(t *testing.T) {
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	// One processor per goroutine, as in separate processes: each starts
	// out speculative and optimistic.
	const goroutines = 8
	procs := make([]*projection.Processor, goroutines)
	for g := range procs {
		procs[g] = opProcessor(t, db, opConfig(), opJournal{"journal"})
	}
	proc := procs[0]
	var events []aggregate.Event
	for _, agg := range []string{"a", "b", "c"} {
		for v := int64(1); v <= 70; v++ {
			events = append(events, aggregate.Event{Aggregate: agg, Version: v, Type: "journal.entry", Data: []byte(fmt.Sprintf(`{"n": %d}`, v))})
		}
	}
	// Chunks of 7 consecutive versions of each aggregate, in stream order.
	var chunks [][]aggregate.Event
	for from := 0; from < 70; from += 7 {
		var c []aggregate.Event
		for i := range 3 {
			c = append(c, events[i*70+from:i*70+from+7]...)
		}
		chunks = append(chunks, c)
	}
	errs := make(chan error, goroutines*len(chunks))
	start := make(chan struct{})
	done := make(chan struct{})
	for g := range goroutines {
		go func() {
			defer func() { done <- struct{}{} }()
			<-start
			for k := range chunks {
				// Half the goroutines go in stream order, racing for the same
				// chunk; the others start further on.
				if _, err := procs[g].Process(ctx, projection.Batch{Events: chunks[(k+g%2*g)%len(chunks)]}); err != nil {
					errs <- err
				}
			}
		}()
	}
	close(start)
	for range goroutines {
		<-done
	}
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	_, err := proc.Process(ctx, projection.Batch{Events: events}) // drains stragglers
	require.NoError(t, err)
	projectiontest.RequireSettled(t, proc, events)
	require.Equal(t, map[string][]int64{"a": rangeOf(1, 70), "b": rangeOf(1, 70), "c": rangeOf(1, 70)}, opJournalModel(t, db, "journal"))
}

func rangeOf(from, to int64) []int64 {
	var out []int64
	for v := from; v <= to; v++ {
		out = append(out, v)
	}
	return out
}
