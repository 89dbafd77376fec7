package esdb_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
)

// truncate makes revisions below before unreadable.
func (e *env) truncate(t testing.TB, stream string, before uint64) {
	t.Helper()
	if e.srv != nil {
		e.srv.Truncate(stream, before)
		return
	}
	var m esdbc.StreamMetadata
	m.SetTruncateBefore(before)
	_, err := e.client.SetStreamMetadata(context.Background(), stream, esdbc.AppendToStreamOptions{}, m)
	require.NoError(t, err)
}

// deleteStream soft-deletes a stream.
func (e *env) deleteStream(t testing.TB, stream string) {
	t.Helper()
	if e.srv != nil {
		e.srv.DeleteStream(stream)
		return
	}
	_, err := e.client.DeleteStream(context.Background(), stream, esdbc.DeleteStreamOptions{})
	require.NoError(t, err)
}

// appended appends a ledger stream (generate) to a server of the test's
// own and returns the env, a bundle and the stream.
func appended(t *testing.T, seed uint64, payments, versions int) (*env, *bundle, []aggregate.Event) {
	t.Helper()
	e, b, events := newEnv(t), setup(t), generate(seed, payments, versions)
	e.appendEvents(t, events)
	return e, b, events
}

// withheld appends a ledger stream of payments payments of 5 versions
// (generate) to a server of the test's own and processes it without the
// version 3 of each payment, so that 4 and 5 park behind it; it returns the
// env, the bundle, the stream and the results.
func withheld(t *testing.T, seed uint64, payments int) (*env, *bundle, []aggregate.Event, []projection.Result) {
	t.Helper()
	e, b, events := appended(t, seed, payments, 5)
	res, err := b.Proc.Process(t.Context(), projection.Batch{Events: without(events, 3)})
	require.NoError(t, err)
	return e, b, events, res
}

// without returns events minus the given versions of every aggregate.
func without(events []aggregate.Event, versions ...int64) []aggregate.Event {
	var out []aggregate.Event
	for _, e := range events {
		skip := false
		for _, v := range versions {
			skip = skip || e.Version == v
		}
		if !skip {
			out = append(out, e)
		}
	}
	return out
}

// repairConfig starts at the end of $all: only gap repair brings events.
func repairConfig(e *env, b *bundle) esdb.Config {
	return esdb.Config{
		URL: e.url, Processor: b.Proc, Name: "repair", FromEnd: true,
		RepairAfter: 100 * time.Millisecond, RepairEvery: 20 * time.Millisecond,
		Mapping: esdb.Mapping{StreamPrefix: e.prefix},
	}
}

func TestGapRepair(t *testing.T) {
	t.Parallel()

	// Version 3 of each payment is withheld; 4 and 5 park behind it; gap
	// repair reads 3 from the stream and the rest drains, in order.
	t.Run("Repaired", func(t *testing.T) {
		t.Parallel()
		e, b, events, res := withheld(t, 7, 3)
		parked := 0
		for _, r := range res {
			if r.Outcome == projection.Parked {
				parked++
			}
		}
		require.Equal(t, 6, parked)

		r := start(t, repairConfig(e, b))
		waitFor(t, r.repairs, applied(len(events), b.Proc), "the gaps repaired")
		require.NoError(t, r.stop())
		b.RequireFold(t, events)
		require.EqualValues(t, 3, r.src.Stats().Repaired)
		for _, rp := range r.repairsSoFar() {
			require.False(t, rp.Missing)
			require.NoError(t, rp.Err)
			require.Equal(t, int64(3), rp.From)
			require.Equal(t, int64(3), rp.To)
		}
		var n int
		require.NoError(t, b.DB.Pool.QueryRow(t.Context(), `SELECT count(*) FROM operator_log`).Scan(&n))
		require.Zero(t, n)
	})

	// The missing version is not in the stream any more: one operator-log
	// row per gap, however many sources see it, and nothing applied.
	for _, c := range []struct {
		name   string
		remove func(t *testing.T, e *env, stream string)
		reason string
	}{
		{"Truncated", func(t *testing.T, e *env, stream string) { e.truncate(t, stream, 3) }, "are not in stream"},
		{"Deleted", func(t *testing.T, e *env, stream string) { e.deleteStream(t, stream) }, "not found"},
	} {
		t.Run("MissingAtSource/"+c.name, func(t *testing.T) {
			t.Parallel()
			e, b, events, _ := withheld(t, 8, 1)
			agg := events[0].Aggregate
			c.remove(t, e, e.stream(agg))

			// Two sources (two processes) find the gap; one row records it.
			r1, r2 := start(t, repairConfig(e, b)), start(t, repairConfig(e, b))
			sawMissing := func(r *running) bool {
				for _, rp := range r.repairsSoFar() {
					require.NoError(t, rp.Err)
					if rp.Missing {
						return true
					}
				}
				return false
			}
			waitFor(t, r1.repairs, func() bool { return sawMissing(r1) }, "the first source's repair")
			waitFor(t, r2.repairs, func() bool { return sawMissing(r2) }, "the second source's repair")
			require.NoError(t, r1.stop())
			require.NoError(t, r2.stop())
			rows, err := b.DB.Pool.Query(t.Context(), `SELECT action, projection, aggregate, from_version, to_version, reason FROM operator_log`)
			require.NoError(t, err)
			type logRow struct {
				Action, Projection, Aggregate string
				From, To                      int64
				Reason                        string
			}
			var got []logRow
			for rows.Next() {
				var l logRow
				require.NoError(t, rows.Scan(&l.Action, &l.Projection, &l.Aggregate, &l.From, &l.To, &l.Reason))
				got = append(got, l)
			}
			require.NoError(t, rows.Err())
			require.Len(t, got, 1, "one row per gap")
			require.Equal(t, "gap-missing-at-source", got[0].Action)
			require.Equal(t, "ledger", got[0].Projection)
			require.Equal(t, agg, got[0].Aggregate)
			require.Equal(t, int64(3), got[0].From)
			require.Equal(t, int64(3), got[0].To)
			require.Contains(t, got[0].Reason, c.reason)
			require.EqualValues(t, 1, r1.src.Stats().GapsMissing+r2.src.Stats().GapsMissing)

			// Nothing applied wrongly: the payment stays at version 2 with
			// 4 and 5 parked, for an operator to decide.
			var version int64
			var parked int
			require.NoError(t, b.DB.Pool.QueryRow(t.Context(), `SELECT greatest(v.version, coalesce(p.version, 0)), v.parked FROM versions v
LEFT JOIN ledger_payments p ON p.payment_id = v.aggregate WHERE v.aggregate = $1`, agg).Scan(&version, &parked))
			require.Equal(t, int64(2), version)
			require.Equal(t, 2, parked)
			b.RequireFold(t, events[:2])
		})
	}

	// Versions from a metadata field: revision and version differ, so gap
	// repair reads the stream's tail and maps it.
	t.Run("VersionFromMetadata", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b := setup(t)
		events := generate(9, 1, 5)
		stream := e.stream(events[0].Aggregate)
		// Revision 0 is not the aggregate's: a system event, skipped.
		e.appendRaw(t, stream, esdbc.EventData{EventType: "$opened", ContentType: esdbc.ContentTypeJson, Data: []byte(`{}`)})
		for i := range events {
			events[i].Metadata = []byte(fmt.Sprintf(`{"version":%d}`, events[i].Version))
			e.appendRaw(t, stream, esdbc.EventData{EventType: events[i].Type, ContentType: esdbc.ContentTypeJson, Data: events[i].Data, Metadata: events[i].Metadata})
		}
		_, err := b.Proc.Process(t.Context(), projection.Batch{Events: without(events, 3)})
		require.NoError(t, err)

		cfg := repairConfig(e, b)
		cfg.Mapping.VersionField = "version"
		r := start(t, cfg)
		waitFor(t, r.repairs, applied(len(events), b.Proc), "the gap repaired")
		require.NoError(t, r.stop())
		b.RequireFold(t, events)
		require.EqualValues(t, 1, r.src.Stats().Repaired)
	})
}

func TestRepairNow(t *testing.T) {
	t.Parallel()

	// newSource returns a Source that is never run: RepairNow works
	// without Run, whatever RepairAfter says.
	newSource := func(t *testing.T, e *env, b *bundle, onRepair func(esdb.Repair)) *esdb.Source {
		t.Helper()
		src, err := esdb.New(&esdb.Config{
			URL: e.url, Processor: b.Proc, Name: "repair-now", RepairAfter: time.Hour,
			Mapping: esdb.Mapping{StreamPrefix: e.prefix}, OnRepair: onRepair,
		})
		require.NoError(t, err)
		return src
	}

	t.Run("Repaired", func(t *testing.T) {
		t.Parallel()
		e, b, events, _ := withheld(t, 10, 3)
		var hooked []esdb.Repair
		src := newSource(t, e, b, func(r esdb.Repair) { hooked = append(hooked, r) })

		// One aggregate only.
		agg := events[0].Aggregate
		reps, err := src.RepairNow(t.Context(), &esdb.RepairOptions{Aggregate: agg})
		require.NoError(t, err)
		require.Equal(t, []esdb.Repair{{Aggregate: agg, From: 3, To: 3, Found: 1, Fed: 1, Outcomes: map[string]int{"applied": 1}}}, reps)
		require.Equal(t, reps, hooked)
		v, err := b.Proc.Version(t.Context(), "ledger", agg)
		require.NoError(t, err)
		require.Equal(t, int64(5), v, "version 3 read from the stream, 4 and 5 drained")

		// At most one aggregate, then the rest.
		reps, err = src.RepairNow(t.Context(), &esdb.RepairOptions{Projection: "ledger", Limit: 1})
		require.NoError(t, err)
		require.Len(t, reps, 1)
		require.NotEqual(t, agg, reps[0].Aggregate)
		reps, err = src.RepairNow(t.Context(), nil)
		require.NoError(t, err)
		require.Len(t, reps, 1)
		b.RequireFold(t, events)
		require.EqualValues(t, 3, src.Stats().Repaired)

		reps, err = src.RepairNow(t.Context(), nil)
		require.NoError(t, err)
		require.Empty(t, reps, "nothing waits any more")

		_, err = src.RepairNow(t.Context(), &esdb.RepairOptions{Projection: "nope"})
		require.ErrorIs(t, err, projection.ErrUnknownProjection)
	})

	// Versions the stream does not have are reported and recorded once in
	// the operator log, however often RepairNow looks.
	t.Run("MissingAtSource", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b := setup(t)
		events := generate(11, 1, 5)
		agg := events[0].Aggregate
		e.appendEvents(t, events[:2])
		_, err := b.Proc.Process(t.Context(), projection.Batch{Events: without(events, 3, 4)})
		require.NoError(t, err)
		src := newSource(t, e, b, nil)
		for range 2 {
			reps, err := src.RepairNow(t.Context(), nil)
			require.NoError(t, err)
			require.Equal(t, []esdb.Repair{{Aggregate: agg, From: 3, To: 4, Outcomes: map[string]int{}, Absent: []esdb.VersionRange{{From: 3, To: 4}}, Missing: true}}, reps)
			require.Equal(t, "3-4", reps[0].Absent[0].String())
		}
		var n int
		require.NoError(t, b.DB.Pool.QueryRow(t.Context(),
			`SELECT count(*) FROM operator_log WHERE action = 'gap-missing-at-source' AND aggregate = $1 AND from_version = 3 AND to_version = 4`, agg).Scan(&n))
		require.Equal(t, 1, n)
		require.EqualValues(t, 1, src.Stats().GapsMissing)

		// The stream of another aggregate does not exist at all.
		other := generate(12, 1, 2)
		for i := range other {
			other[i].Aggregate = "absent"
		}
		_, err = b.Proc.Process(t.Context(), projection.Batch{Events: other[1:]})
		require.NoError(t, err)
		reps, err := src.RepairNow(t.Context(), &esdb.RepairOptions{Aggregate: "absent"})
		require.NoError(t, err)
		require.Len(t, reps, 1)
		require.Equal(t, []esdb.VersionRange{{From: 1, To: 1}}, reps[0].Absent)
		require.Contains(t, reps[0].Reason, "not found")
	})
}
