package projection_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

func TestStatusEmpty(t *testing.T) {
	t.Parallel()
	db := pgtest.NewMigrated(t)
	proc := opProcessor(t, db, nil, opJournal{"b"}, ledger.New(nil), opJournal{"a"})
	st, err := proc.Status(t.Context(), nil)
	require.NoError(t, err)
	require.Equal(t, []projection.ProjectionStatus{{Name: "a"}, {Name: "b"}, {Name: "ledger"}}, st.Projections)
	require.Equal(t, projection.RejectedCounts{}, st.Rejected)
	require.Equal(t, projection.Attention{Quarantined: []projection.QuarantineEntry{}, Conflicts: []projection.ConflictEntry{},
		Rejected: []projection.RejectedEntry{}}, st.Attention)
	require.Empty(t, st.Checkpoints)
}

// TestInspect builds a known gate state in two projections — the ledger,
// and a journal whose handler fails on one event — and reads it through
// the operator views.
func TestInspect(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	const poison = "pay-000001"
	fault := newOpFault(poison, 2)
	// The ledger keeps version rows, whose applied log holds ids and
	// hashes (the inline ledger's views are covered by the conformance
	// suite's RequireSettled).
	proc := opProcessor(t, db, opConfig(), ledger.New(&ledger.Options{VersionRows: true}), opFaultyBatch{opJournal{"journal"}, fault})

	// 4 payments × 3 versions. pay-000000 v1 is withheld (v2 and v3 park in
	// both projections); the journal quarantines pay-000001 v2 (v3 parks
	// behind it); pay-000002 v1 is redelivered with another payload (a
	// conflict in both).
	events := ledger.Generate(rand.New(rand.NewPCG(31, 32)), 4, 3)
	withheld := opOf(events, "pay-000000")[0]
	delivered := slices.DeleteFunc(slices.Clone(events), func(e aggregate.Event) bool {
		return e.Aggregate == withheld.Aggregate && e.Version == 1
	})
	began := time.Now()
	_, err := proc.Process(ctx, projection.Batch{Events: delivered})
	require.NoError(t, err)
	original := opOf(events, "pay-000002")[0]
	changed := original
	changed.Data = []byte(`{"payer":"mallory","payee":"mallory","amount":1}`)
	res, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{changed}})
	require.NoError(t, err)
	require.Equal(t, projection.Conflict, res[0].Outcome)
	ended := time.Now()

	t.Run("Status", func(t *testing.T) {
		full, err := proc.Status(ctx, nil)
		require.NoError(t, err)
		st := full.Projections
		require.Len(t, st, 2)
		for i, s := range st {
			require.False(t, s.OldestParked.IsZero())
			require.WithinRange(t, s.OldestParked, began.Add(-time.Minute), ended.Add(time.Minute)) // clock skew between server and test
			require.GreaterOrEqual(t, s.OldestParkedAge, time.Duration(0))
			require.Equal(t, s.OldestParkedAge.Seconds(), s.OldestParkedAgeSeconds)
			st[i].OldestParkedAge, st[i].OldestParkedAgeSeconds = 0, 0
		}
		require.Len(t, full.Attention.Quarantined, 1)
		require.Nil(t, full.Attention.Quarantined[0].Data, "the status omits payloads")
		require.Len(t, full.Attention.Conflicts, 2)
		require.Equal(t, projection.ProjectionStatus{
			Name: "journal", Aggregates: 4, Events: 3 + 3 + 1, Parked: 3, ParkedAggregates: 2,
			OldestParked: st[0].OldestParked, Quarantined: 1, Conflicts: 1,
		}, st[0])
		require.Equal(t, projection.ProjectionStatus{
			Name: "ledger", Aggregates: 4, Events: 3 * 3, Parked: 2, ParkedAggregates: 1,
			OldestParked: st[1].OldestParked, Quarantined: 0, Conflicts: 1,
		}, st[1])
	})

	t.Run("Version", func(t *testing.T) {
		for _, c := range []struct {
			proj, agg string
			want      int64
		}{
			{"ledger", "pay-000003", 3},
			{"ledger", "pay-000000", 0},
			{"journal", poison, 1},
			{"ledger", poison, 3},
			{"ledger", "no-such-payment", 0},
		} {
			v, err := proc.Version(ctx, c.proj, c.agg)
			require.NoError(t, err)
			require.Equal(t, c.want, v, "%s %s", c.proj, c.agg)
		}
		_, err := proc.Version(ctx, "nope", "pay-000000")
		require.ErrorIs(t, err, projection.ErrUnknownProjection)
	})

	t.Run("Quarantined", func(t *testing.T) {
		q, err := proc.Quarantined(ctx, projection.ListOptions{})
		require.NoError(t, err)
		require.Len(t, q, 1)
		e := opOf(events, poison)[1]
		got := q[0]
		require.WithinRange(t, got.QuarantinedAt, began.Add(-time.Minute), ended.Add(time.Minute))
		require.Equal(t, got.QuarantinedAt, got.LastAttemptAt)
		require.Contains(t, got.Error, errOpPoison.Error())
		got.QuarantinedAt, got.LastAttemptAt, got.Error = time.Time{}, time.Time{}, ""
		require.Equal(t, projection.QuarantineEntry{
			Projection: "journal", Generation: 1, Aggregate: poison, Version: 2, EventID: e.StableID(),
			Type: e.Type, Data: e.Data, Attempts: 3,
		}, got)

		for _, c := range []struct {
			name string
			opts projection.ListOptions
			want int
		}{
			{"ByProjection", projection.ListOptions{Projection: "journal"}, 1},
			{"OtherProjection", projection.ListOptions{Projection: "ledger"}, 0},
			{"ByAggregate", projection.ListOptions{Aggregate: poison}, 1},
			{"OtherAggregate", projection.ListOptions{Aggregate: "pay-000000"}, 0},
			{"Injection", projection.ListOptions{Aggregate: "x' OR true; --"}, 0},
		} {
			q, err := proc.Quarantined(ctx, c.opts)
			require.NoError(t, err, c.name)
			require.Len(t, q, c.want, c.name)
		}
		_, err = proc.Quarantined(ctx, projection.ListOptions{Projection: "nope"})
		require.ErrorIs(t, err, projection.ErrUnknownProjection)

		// A failed retry counts an attempt.
		var he *projection.HandlerError
		require.ErrorAs(t, acted(proc.RetryQuarantined(ctx, "journal", poison, nil)), &he)
		q, err = proc.Quarantined(ctx, projection.ListOptions{})
		require.NoError(t, err)
		require.Equal(t, 4, q[0].Attempts)
		require.True(t, q[0].LastAttemptAt.After(q[0].QuarantinedAt))
	})

	t.Run("Conflicts", func(t *testing.T) {
		cs, err := proc.Conflicts(ctx, projection.ListOptions{})
		require.NoError(t, err)
		require.Len(t, cs, 2)
		for i, proj := range []string{"journal", "ledger"} {
			c := cs[i]
			require.Positive(t, c.ID)
			require.WithinRange(t, c.FirstSeen, began.Add(-time.Minute), ended.Add(time.Minute))
			require.Equal(t, c.FirstSeen, c.LastSeen)
			c.ID, c.FirstSeen, c.LastSeen = 0, time.Time{}, time.Time{}
			require.Equal(t, projection.ConflictEntry{
				Projection: proj, Generation: 1, Aggregate: original.Aggregate, Version: 1,
				ExistingState: "applied", ExistingEventID: original.StableID(), ExistingHash: original.Hash(),
				IncomingEventID: changed.StableID(), IncomingHash: changed.Hash(),
				Type: changed.Type, Data: changed.Data, Count: 1,
			}, c)
		}
		require.Less(t, cs[0].ID, cs[1].ID)

		// Another delivery of the same conflicting event counts.
		_, err = proc.Process(ctx, projection.Batch{Events: []aggregate.Event{changed}})
		require.NoError(t, err)
		cs, err = proc.Conflicts(ctx, projection.ListOptions{Projection: "ledger"})
		require.NoError(t, err)
		require.Len(t, cs, 1)
		require.EqualValues(t, 2, cs[0].Count)
		require.False(t, cs[0].LastSeen.Before(cs[0].FirstSeen))

		// Pages.
		all, err := proc.Conflicts(ctx, projection.ListOptions{})
		require.NoError(t, err)
		page, err := proc.Conflicts(ctx, projection.ListOptions{Limit: 1})
		require.NoError(t, err)
		require.Equal(t, all[:1], page)
		page, err = proc.Conflicts(ctx, projection.ListOptions{Limit: 1, AfterID: page[0].ID})
		require.NoError(t, err)
		require.Equal(t, all[1:], page)
		page, err = proc.Conflicts(ctx, projection.ListOptions{AfterID: page[0].ID})
		require.NoError(t, err)
		require.Empty(t, page)

		cs, err = proc.Conflicts(ctx, projection.ListOptions{Aggregate: "pay-000003"})
		require.NoError(t, err)
		require.Empty(t, cs)
		_, err = proc.Conflicts(ctx, projection.ListOptions{Projection: "nope"})
		require.ErrorIs(t, err, projection.ErrUnknownProjection)
	})

	t.Run("Rejected", func(t *testing.T) {
		bad := []aggregate.Event{
			{Aggregate: "r-1", Version: 1, Type: ledger.Authorized, Data: []byte(`{`), Metadata: []byte(`{"trace":"t1"}`)},
			{Aggregate: "r-2", Version: 0, Type: ledger.Authorized, Data: []byte(`{}`)},
			{ID: "evt-3", Aggregate: "r-3", Version: 7, Type: ledger.Captured, Data: []byte(`{}`), Metadata: []byte(`nope`)},
		}
		_, err := proc.Process(ctx, projection.Batch{Events: append(bad, bad[0]), Source: "inspect"})
		require.NoError(t, err)
		rs, err := proc.Rejected(ctx, projection.ListOptions{})
		require.NoError(t, err)
		require.Len(t, rs, 3)
		byAgg := map[string]projection.RejectedEntry{}
		for _, r := range rs {
			require.Positive(t, r.ID)
			require.Len(t, r.Fingerprint, 32)
			require.Equal(t, "inspect", r.Source)
			require.True(t, r.ReplayedAt.IsZero())
			require.WithinRange(t, r.FirstSeen, began.Add(-time.Minute), time.Now().Add(time.Minute))
			byAgg[r.Aggregate] = r
		}
		for i, reason := range []string{"invalid_json", "bad_version", "invalid_metadata"} {
			r := byAgg[bad[i].Aggregate]
			require.Equal(t, reason, r.Reason)
			require.Equal(t, bad[i].ID, r.EventID)
			require.Equal(t, bad[i].Version, r.Version)
			require.Equal(t, bad[i].Type, r.Type)
			require.Equal(t, projection.Payload(bad[i].Data), r.Data)
			require.EqualValues(t, len(bad[i].Data), r.Size)
			require.Equal(t, projection.Payload(bad[i].Metadata), r.Metadata)
			require.Equal(t, bad[i].Validate(nil).Error(), r.Error)
		}
		require.EqualValues(t, 2, byAgg["r-1"].Count)
		require.EqualValues(t, 1, byAgg["r-2"].Count)

		page, err := proc.Rejected(ctx, projection.ListOptions{Limit: 2})
		require.NoError(t, err)
		require.Equal(t, rs[:2], page)
		page, err = proc.Rejected(ctx, projection.ListOptions{AfterID: page[1].ID})
		require.NoError(t, err)
		require.Equal(t, rs[2:], page)
		page, err = proc.Rejected(ctx, projection.ListOptions{Aggregate: "r-2"})
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Equal(t, byAgg["r-2"], page[0])
	})
}
