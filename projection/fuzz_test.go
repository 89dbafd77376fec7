package projection_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// fuzzStore is the projection of FuzzProcess: it stores every event it
// applies, text as text and payloads as jsonb, so that what PostgreSQL
// cannot store in them (a \u0000 escape, a number over numeric's range, JSON
// nested too deep) reaches the database. Each fuzz input gets a projection
// of its own name: its gate state starts empty.
type fuzzStore struct{ name string }

func (s fuzzStore) Name() string { return s.name }

// fuzzTarget is the aggregate FuzzProcess applies versions 1 and 2 of before
// each input's batch.
const fuzzTarget = "target"

func (s fuzzStore) Apply(ctx context.Context, tx *projection.Tx, e aggregate.Event) error {
	var meta []byte
	if len(e.Metadata) > 0 {
		meta = e.Metadata
	}
	tx.Queue(`INSERT INTO fuzz_store (projection, aggregate, version, event_id, type, data, metadata)
VALUES ($1, $2, $3, $4, $5, $6::text::jsonb, $7::text::jsonb)`, s.name, e.Aggregate, e.Version, e.StableID(), e.Type, string(e.Data), nullText(meta))
	return nil
}

func nullText(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// FuzzProcess delivers an envelope of arbitrary bytes in every field —
// aggregate id, version, event id, type, data, metadata — in one batch with
// valid events of two other aggregates, twice (a redelivery). Process never
// returns an error; the valid events apply (the first time) and are
// duplicates (the second); the fuzzed envelope is applied or parked if it is
// valid and storable, else it is Rejected with a typed error
// (*aggregate.ValidationError, or *projection.UnstorableError when the
// database refuses a value validation let through) and recorded once, with
// its exact bytes: ReplayRejected feeds them back and finds the same
// record. It is never a conflict; it is quarantined only when the
// projection's own table refuses it (a handler failure).
//
// The seeds run with the package's tests. To fuzz (a few minutes; each input
// runs real transactions against PostgreSQL):
//
//	go test -run '^$' -fuzz '^FuzzProcess$' -fuzztime 5m ./projection/
//
// A failing input is written to testdata/fuzz/FuzzProcess/ and then runs
// with the seeds.
func FuzzProcess(f *testing.F) {
	db := pgtest.NewMigrated(f)
	_, err := db.Pool.Exec(context.Background(), `CREATE TABLE fuzz_store (
  projection text, aggregate text, version bigint, event_id text, type text, data jsonb, metadata jsonb)`)
	require.NoError(f, err)

	type seed struct {
		agg       string
		version   int64
		id, typ   string
		data, met []byte
	}
	for _, s := range []seed{
		{"pay-1", 1, "", "payment.authorized", []byte(`{"amount":1}`), nil},
		{"pay-1", 4, "pay-1:4", "payment.captured", []byte(`{}`), []byte(`{"trace":"x"}`)}, // parks
		{"pay\x00nul", 1, "", "t", []byte(`{}`), nil},
		{"pay\xff\xfe", 1, "", "t", []byte(`{}`), nil},
		{"pay-x", 1, "id\x00nul", "t", []byte(`{}`), nil},
		{"pay-y", 1, "id\xc3\x28", "t", []byte(`{}`), nil},
		{"pay-park", 5, "", "payment.\xe2\x28\xa1", []byte(`{}`), nil},
		{incompressible(1, 3000), 1, "", "t", []byte(`{}`), nil},
		{"pay-z", 0, "zero\x00version", "", []byte(`{`), []byte(`nope`)},
		{"", -1, "", "", nil, nil},
		{"pay-u", 1, "", "t", []byte(`{"s":"\u0000"}`), nil},      // valid JSON, not storable as jsonb
		{"pay-u", 3, "", "t", []byte(`{}`), []byte(`["\u0000"]`)}, // … when it parks, in metadata
		{"pay-n", 1, "", "t", []byte(`1e1000000`), nil},           // over numeric's range
		{"pay-d", 1, "", "t", []byte(strings.Repeat("[", 5000) + strings.Repeat("]", 5000)), nil},
		{"pay-m", 1 << 62, strings.Repeat("é", 256), strings.Repeat("t", 256), []byte(` 1 `), []byte(` `)},
		{"valid-a", 1, "", "t", []byte(`{"other":"id"}`), nil},               // another delivery's aggregate
		{fuzzTarget, 1, incompressible(3, 512), "t", []byte(`{"n":2}`), nil}, // a conflict with a 512-byte id
		{fuzzTarget, 2, "", "t", []byte(`{"n":1}`), nil},                     // the applied event again
		{fuzzTarget, 2, "", "t", []byte(`{"n":1}`), []byte(`{"m":1}`)},       // … with other metadata
		{fuzzTarget, 1, "", "t\x00", []byte(`{"n":1}`), nil},                 // an invalid redelivery
		{fuzzTarget, 3, "", "t", []byte(`{"n":"\u0000"}`), nil},              // the next version, unstorable
		{fuzzTarget, 4, incompressible(4, 512), incompressible(5, 256), []byte(`{}`), nil},
	} {
		f.Add(s.agg, s.version, s.id, s.typ, s.data, s.met)
	}

	f.Fuzz(func(t *testing.T, agg string, version int64, id, typ string, data, meta []byte) {
		ctx := context.Background()
		name := "fz-" + uuid.NewString()
		var batches []projection.BatchInfo
		proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema,
			OnBatch: func(bi projection.BatchInfo) { batches = append(batches, bi) }}, fuzzStore{name})
		require.NoError(t, err)

		// The target aggregate is at version 2 before the batch: a fuzzed
		// envelope of it may be a duplicate, a conflict, applied or parked.
		target := []aggregate.Event{
			{Aggregate: fuzzTarget, Version: 1, Type: "t", Data: []byte(`{"n":1}`)},
			{Aggregate: fuzzTarget, Version: 2, Type: "t", Data: []byte(`{"n":1}`)},
		}
		_, err = proc.Process(ctx, projection.Batch{Events: target})
		require.NoError(t, err)

		fuzzed := aggregate.Event{Aggregate: agg, Version: version, ID: id, Type: typ, Data: data, Metadata: meta}
		invalid := fuzzed.Validate(nil)
		// What a valid, storable fuzzed envelope becomes: the next version
		// is applied, a later one parked; an earlier one of the target is
		// a duplicate if it is the applied event, else a conflict.
		next := int64(1)
		if agg == fuzzTarget {
			next = 3
		}
		var want [2]projection.Outcome // per round
		switch {
		case invalid != nil:
		case version == next:
			want = [2]projection.Outcome{projection.Applied, projection.Duplicate}
		case version > next:
			want = [2]projection.Outcome{projection.Parked, projection.Duplicate}
		case fuzzed.StableID() == target[version-1].StableID() && bytes.Equal(fuzzed.Hash(), target[version-1].Hash()):
			want = [2]projection.Outcome{projection.Duplicate, projection.Duplicate}
		default:
			want = [2]projection.Outcome{projection.Conflict, projection.Conflict}
		}
		// Two valid aggregates, named apart from the fuzzed one, versions 1–3.
		var valid []aggregate.Event
		for _, a := range []string{"valid-a", "valid-b"} {
			if a == agg {
				a += "~"
			}
			for v := int64(1); v <= 3; v++ {
				valid = append(valid, aggregate.Event{Aggregate: a, Version: v, Type: "t", Data: []byte(`{"n":1}`)})
			}
		}
		events := []aggregate.Event{valid[2], valid[3], valid[0], fuzzed, valid[5], valid[1], valid[4]}
		const at = 3 // the fuzzed delivery's index

		var first projection.Outcome
		for round := range 2 {
			res, err := proc.Process(ctx, projection.Batch{Events: events, Source: name})
			require.NoError(t, err, "round %d: Process must not fail", round)
			require.Len(t, res, len(events))
			for i, r := range res {
				if i == at {
					continue
				}
				want := projection.Applied
				if round == 1 {
					want = projection.Duplicate
				}
				require.Equal(t, want, r.Outcome, "round %d: %s v%d", round, events[i].Aggregate, events[i].Version)
			}
			r := res[at]
			var verr *aggregate.ValidationError
			var uerr *projection.UnstorableError
			switch {
			case invalid != nil:
				require.Equal(t, projection.Rejected, r.Outcome, "round %d: invalid envelope: %v", round, invalid)
				require.ErrorAs(t, r.Err, &verr)
				require.Equal(t, invalid.Error(), r.Err.Error())
			case r.Outcome == projection.Quarantined:
				// The projection's own write refused the event: a handler
				// failure, isolated like any other.
				require.Equal(t, projection.Applied, want[0], "round %d: only the handler of an applied event can fail", round)
				require.True(t, round == 0 || first == projection.Quarantined, "round %d: quarantined on redelivery only", round)
				q, err := proc.Quarantined(ctx, projection.ListOptions{Projection: name})
				require.NoError(t, err)
				require.Len(t, q, 1)
				require.Regexp(t, `SQLSTATE (22|54)`, q[0].Error, "a value the projection's table cannot store")
			case r.Outcome == projection.Rejected:
				require.ErrorAs(t, r.Err, &uerr, "round %d: a valid envelope is rejected only when unstorable", round)
				require.Equal(t, name, uerr.Projection)
				require.True(t, round == 0 || first == projection.Rejected, "round %d: rejected on redelivery only", round)
			default:
				require.Equal(t, want[round], r.Outcome, "round %d", round)
				require.NoError(t, r.Err)
			}
			if round == 0 {
				first = r.Outcome
			}
		}
		if first == projection.Conflict {
			cs, err := proc.Conflicts(ctx, projection.ListOptions{Projection: name})
			require.NoError(t, err)
			require.Len(t, cs, 1)
			require.Equal(t, version, cs[0].Version)
			require.EqualValues(t, 2, cs[0].Count, "one record, delivered twice")
		}
		maxAttempts := 2 // one, or a careful one after the gate's write was refused
		if first == projection.Quarantined {
			maxAttempts = projection.DefaultMaxAttempts
		}
		for _, bi := range batches {
			require.LessOrEqual(t, bi.Attempts, maxAttempts)
		}

		// Never another aggregate blocked: the valid ones are at version 3,
		// stored once per version.
		for _, a := range []string{valid[0].Aggregate, valid[3].Aggregate} {
			v, err := proc.Version(ctx, name, a)
			require.NoError(t, err)
			require.EqualValues(t, 3, v, a)
		}
		stored := func(e aggregate.Event) int {
			var n int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM fuzz_store
WHERE projection = $1 AND aggregate = $2 AND version = $3 AND event_id = $4`, name, e.Aggregate, e.Version, e.StableID()).Scan(&n))
			return n
		}
		for _, e := range append(valid, target...) {
			require.Equal(t, 1, stored(e), "%s v%d stored once", e.Aggregate, e.Version)
		}
		if first == projection.Applied {
			require.Equal(t, 1, stored(fuzzed), "the fuzzed event, stored once")
		}

		if first != projection.Rejected {
			return
		}
		// The rejected record: one, delivered twice, with the exact bytes.
		rec := fuzzRejected(t, db, name)
		require.EqualValues(t, 2, rec.count)
		require.Equal(t, fuzzed.ID, rec.ev.ID)
		require.Equal(t, fuzzed.Aggregate, rec.ev.Aggregate)
		require.Equal(t, fuzzed.Version, rec.ev.Version)
		require.Equal(t, fuzzed.Type, rec.ev.Type)
		require.True(t, bytes.Equal(fuzzed.Data, rec.ev.Data), "data: %q, want %q", rec.ev.Data, fuzzed.Data)
		require.True(t, bytes.Equal(fuzzed.Metadata, rec.ev.Metadata), "metadata: %q, want %q", rec.ev.Metadata, fuzzed.Metadata)
		wantReason := projection.ReasonUnstorable
		if invalid != nil {
			wantReason = aggregate.Reason(invalid)
		}
		require.Equal(t, wantReason, rec.reason)
		list, err := proc.Rejected(ctx, projection.ListOptions{AfterID: rec.id - 1, Limit: 1})
		require.NoError(t, err)
		require.Len(t, list, 1)
		require.Equal(t, rec.id, list[0].ID)
		require.EqualValues(t, 2, list[0].Count)

		// Replay feeds the stored bytes back: the same delivery again.
		_, err = proc.ReplayRejected(ctx, rec.id, nil)
		require.Error(t, err, "still rejected")
		if invalid != nil {
			var verr *aggregate.ValidationError
			require.ErrorAs(t, err, &verr)
			require.Equal(t, invalid.Error(), err.Error())
			again := fuzzRejected(t, db, name)
			require.Equal(t, rec.id, again.id, "the replay is the same delivery, byte for byte: the same row")
			require.EqualValues(t, 2, again.count, "a replay is not a delivery")
		} else {
			var uerr *projection.UnstorableError
			require.ErrorAs(t, err, &uerr)
		}
	})
}

// fuzzRecord is a rejected record read back with its exact bytes.
type fuzzRecord struct {
	id     int64
	ev     aggregate.Event
	reason string
	count  int64
}

// fuzzRejected reads the one rejected record of source, its text fields
// taken from the raw columns where the text ones hold an escaped form.
func fuzzRejected(t *testing.T, db *pgtest.DB, source string) fuzzRecord {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT id, event_id, raw_event_id, aggregate, raw_aggregate, version,
  type, raw_type, data, metadata, reason, count FROM rejected WHERE source = $1`, source)
	require.NoError(t, err)
	recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (fuzzRecord, error) {
		var r fuzzRecord
		var rawID, rawAgg, rawType []byte
		err := row.Scan(&r.id, &r.ev.ID, &rawID, &r.ev.Aggregate, &rawAgg, &r.ev.Version, &r.ev.Type, &rawType,
			&r.ev.Data, &r.ev.Metadata, &r.reason, &r.count)
		for _, f := range []struct {
			raw []byte
			dst *string
		}{{rawID, &r.ev.ID}, {rawAgg, &r.ev.Aggregate}, {rawType, &r.ev.Type}} {
			if f.raw != nil {
				*f.dst = string(f.raw)
			}
		}
		return r, err
	})
	require.NoError(t, err)
	require.Len(t, recs, 1, "one record for the delivery")
	return recs[0]
}
