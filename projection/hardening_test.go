package projection_test

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// incompressible returns n bytes of random letters and digits: text that
// pglz cannot squeeze under an index's size limit.
func incompressible(seed uint64, n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	rng := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

// TestHostileEnvelopes delivers, in one batch with valid events of other
// aggregates, envelopes that PostgreSQL cannot store as they are: NUL bytes
// and invalid UTF-8 in the aggregate id, the event id and the type (of an
// event that would park), an aggregate id and an event id of thousands of
// incompressible bytes, and an already invalid envelope (version 0) with a
// NUL in its id. Each is rejected with a typed validation error and recorded
// with its exact bytes; the valid events apply; nothing is returned as an
// error.
func TestHostileEnvelopes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, nil)

	good := ledger.Generate(rand.New(rand.NewPCG(7, 8)), 3, 4)
	first, err := aggregate.New("pay-target", 1, ledger.Authorized, ledger.Data{Payer: "a", Payee: "b", Amount: 5})
	require.NoError(t, err)
	_, err = b.proc.Process(ctx, projection.Batch{Events: []aggregate.Event{first}})
	require.NoError(t, err)

	data := []byte(`{}`)
	hostile := []aggregate.Event{
		{Aggregate: "pay\x00nul", Version: 1, Type: ledger.Authorized, Data: data},
		{Aggregate: "pay\xff\xfe", Version: 1, Type: ledger.Authorized, Data: data},
		{ID: "id\x00nul", Aggregate: "pay-x", Version: 1, Type: ledger.Authorized, Data: data},
		{ID: "id\xc3\x28", Aggregate: "pay-y", Version: 1, Type: ledger.Authorized, Data: data},
		{Aggregate: "pay-park", Version: 5, Type: "payment.\xe2\x28\xa1", Data: data}, // would park
		{Aggregate: incompressible(1, 3000), Version: 1, Type: ledger.Authorized, Data: data},
		// A conflicting delivery (pay-target v1 is applied) with a 100 kB id.
		{ID: incompressible(2, 100_000), Aggregate: "pay-target", Version: 1, Type: ledger.Authorized, Data: []byte(`{"amount":9}`)},
		{ID: "zero\x00version", Aggregate: "pay-z", Version: 0, Type: ledger.Authorized, Data: data},
	}
	events := append(append([]aggregate.Event{}, good...), hostile...)
	rng := rand.New(rand.NewPCG(1, 2))
	perm := rng.Perm(len(events))
	shuffled := make([]aggregate.Event, len(events))
	for i, k := range perm {
		shuffled[i] = events[k]
	}
	for range 2 { // and once more: a redelivery must not wedge either
		res, err := b.proc.Process(ctx, projection.Batch{Events: shuffled, Source: "hostile"})
		require.NoError(t, err)
		for i, k := range perm {
			if k < len(good) {
				require.NotEqual(t, projection.Rejected, res[i].Outcome, "%s v%d", events[k].Aggregate, events[k].Version)
				continue
			}
			require.Equal(t, projection.Rejected, res[i].Outcome, "hostile %d", k-len(good))
			var ve *aggregate.ValidationError
			require.ErrorAs(t, res[i].Err, &ve, "hostile %d", k-len(good))
		}
	}
	b.requireFold(t, append([]aggregate.Event{first}, good...))

	// Every hostile envelope is kept, with its exact bytes.
	rs, err := b.proc.Rejected(ctx, projection.ListOptions{})
	require.NoError(t, err)
	require.Len(t, rs, len(hostile))
	for _, r := range rs {
		require.EqualValues(t, 2, r.Count, "delivered twice, recorded once")
		require.Contains(t, []string{"invalid_text", "too_long", "bad_version"}, r.Reason, r.Error)
	}
	var sawEscaped bool
	for _, r := range rs {
		if strings.Contains(r.Aggregate, `\x00`) {
			sawEscaped = true
			require.Equal(t, `pay\x00nul`, r.Aggregate, "shown escaped")
			// Replay feeds the exact bytes again: still invalid.
			_, err := b.proc.ReplayRejected(ctx, r.ID, nil)
			var ve *aggregate.ValidationError
			require.ErrorAs(t, err, &ve)
			require.ErrorIs(t, err, aggregate.ErrInvalidText)
		}
	}
	require.True(t, sawEscaped)
	var z projection.RejectedEntry
	for _, r := range rs {
		if r.Aggregate == "pay-z" {
			z = r
		}
	}
	require.Equal(t, "pay-z", z.Aggregate)
	require.Equal(t, `zero\x00version`, z.EventID)
	require.Equal(t, "bad_version", z.Reason, "the first of its problems")
	require.Contains(t, z.Error, "NUL", "and every problem is told")
}

// TestRefusedWrites is the last line of defence: a write of the gate that
// the database refuses for one aggregate (here a trigger stands in for a
// value PostgreSQL cannot store) sets that aggregate's deliveries aside as
// rejected, with an *UnstorableError, and the rest of the batch commits —
// when it is the creation of the version row and when it is a later write.
func TestRefusedWrites(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, nil)
	_, err := b.db.Pool.Exec(ctx, `
CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.aggregate LIKE 'refused-%' THEN
    RAISE EXCEPTION 'refusing %', NEW.aggregate USING ERRCODE = CASE TG_TABLE_NAME WHEN 'versions' THEN '54000' ELSE '22023' END;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER refuse_versions BEFORE INSERT ON versions FOR EACH ROW WHEN (NEW.aggregate LIKE 'refused-new%') EXECUTE FUNCTION refuse();
CREATE TRIGGER refuse_parked BEFORE INSERT ON parked FOR EACH ROW EXECUTE FUNCTION refuse();`)
	require.NoError(t, err)

	good := ledger.Generate(rand.New(rand.NewPCG(3, 4)), 4, 3)
	auth := func(id string) aggregate.Event {
		e, err := aggregate.New(id, 1, ledger.Authorized, ledger.Data{Payer: "p", Payee: "q", Amount: 3})
		require.NoError(t, err)
		return e
	}
	approve := func(id string, v int64) aggregate.Event {
		e, err := aggregate.New(id, v, ledger.Approved, ledger.Data{})
		require.NoError(t, err)
		return e
	}
	refused := []aggregate.Event{auth("refused-new-1"), approve("refused-park-1", 3)}
	for range 2 {
		res, err := b.proc.Process(ctx, projection.Batch{Events: append(append([]aggregate.Event{}, good...), refused...), Source: "refusals"})
		require.NoError(t, err)
		for _, r := range res[:len(good)] {
			require.NotEqual(t, projection.Rejected, r.Outcome)
		}
		for _, r := range res[len(good):] {
			require.Equal(t, projection.Rejected, r.Outcome)
			var uerr *projection.UnstorableError
			require.ErrorAs(t, r.Err, &uerr)
			require.Equal(t, "ledger", uerr.Projection)
		}
	}
	b.requireFold(t, good)
	rs, err := b.proc.Rejected(ctx, projection.ListOptions{})
	require.NoError(t, err)
	require.Len(t, rs, 2)
	for _, r := range rs {
		require.Equal(t, projection.ReasonUnstorable, r.Reason)
		require.EqualValues(t, 2, r.Count)
	}
	v, err := b.proc.Version(ctx, "ledger", "refused-park-1")
	require.NoError(t, err)
	require.Zero(t, v)
	c := b.proc.Counts()["ledger"]
	require.EqualValues(t, 4, c.Deliveries[projection.Rejected], "counted once per delivery")
}

// TestStatusAtMaxVersion reaches version 2^63-1 the way the runbook does —
// a parked max-version event and a declared gap — and reads the status.
func TestStatusAtMaxVersion(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	proc := opProcessor(t, db, opConfig(), opJournal{"journal"})
	for _, agg := range []string{"a", "b"} {
		res, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{
			{Aggregate: agg, Version: 1, Type: "note", Data: []byte(`{}`)},
			{Aggregate: agg, Version: math.MaxInt64, Type: "note", Data: []byte(`{}`)},
		}})
		require.NoError(t, err)
		require.Equal(t, []projection.Outcome{projection.Applied, projection.Parked}, outcomes(res))
		require.NoError(t, acted(proc.DeclareGap(ctx, "journal", agg, math.MaxInt64-1, &projection.ActionOptions{Reason: "truncated"})))
		v, err := proc.Version(ctx, "journal", agg)
		require.NoError(t, err)
		require.EqualValues(t, int64(math.MaxInt64), v)
	}
	st, err := proc.Status(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, int64(math.MaxInt64), st.Projections[0].Events, "saturates")
	require.EqualValues(t, 2, st.Projections[0].Aggregates)
	res, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{{Aggregate: "a", Version: math.MaxInt64, Type: "note", Data: []byte(`{}`)}}})
	require.NoError(t, err)
	require.Equal(t, projection.Duplicate, res[0].Outcome)
}

// TestLargeRejectedStaysOutOfStatus rejects a 10 MB delivery: it is kept in
// full for replay, and the status, which lists what needs attention, stays
// small.
func TestLargeRejectedStaysOutOfStatus(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t, nil)
	big := aggregate.Event{Aggregate: "pay-big", Version: 1, Type: ledger.Authorized,
		Data: []byte(`{"blob":"` + strings.Repeat("x", 10<<20) + `"}`)}
	res, err := b.proc.Process(ctx, projection.Batch{Events: []aggregate.Event{big}})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, aggregate.ErrPayloadTooLarge)

	st, err := b.proc.Status(ctx, nil)
	require.NoError(t, err)
	require.Len(t, st.Attention.Rejected, 1)
	body, err := json.Marshal(st)
	require.NoError(t, err)
	require.Less(t, len(body), 10_000, "the status embeds no payload")
	require.EqualValues(t, len(big.Data), st.Attention.Rejected[0].Size)

	full, err := b.proc.Rejected(ctx, projection.ListOptions{})
	require.NoError(t, err)
	require.Equal(t, projection.Payload(big.Data), full[0].Data, "kept in full")
	slim, err := b.proc.Rejected(ctx, projection.ListOptions{OmitPayloads: true})
	require.NoError(t, err)
	require.Nil(t, slim[0].Data)
	require.EqualValues(t, len(big.Data), slim[0].Size)
	_, err = b.proc.ReplayRejected(ctx, full[0].ID, nil)
	require.True(t, errors.Is(err, aggregate.ErrPayloadTooLarge), "still too large: %v", err)
}
