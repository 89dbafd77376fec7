package esdb_test

import (
	"testing"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/source/esdb"
)

// Content that is not JSON, malformed JSON, system events and a poison event:
// rejected with a reason, skipped or quarantined; acknowledged either way,
// and the subscription goes on to apply the good events that follow.
func TestBadInput(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"CatchUp", "Persistent"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			b := setup(t)
			e.appendRaw(t, e.prefix+"bin-1", esdbc.EventData{EventType: "payment.authorized", ContentType: esdbc.ContentTypeBinary, Data: []byte{0xde, 0xad}})
			e.appendRaw(t, e.prefix+"bad-1", esdbc.EventData{EventType: "payment.authorized", ContentType: esdbc.ContentTypeJson, Data: []byte(`{"amount":`)})
			e.appendRaw(t, e.prefix+"sys-1", esdbc.EventData{EventType: "$system", ContentType: esdbc.ContentTypeJson, Data: []byte(`{}`)})
			// Poison: valid, but the ledger's handler fails on it for good (a
			// payment cannot start with a capture). The processor
			// quarantines it; it is acked, not parked on the server.
			e.appendRaw(t, e.prefix+"poison-1", esdbc.EventData{EventType: "payment.captured", ContentType: esdbc.ContentTypeJson, Data: []byte(`{"amount":5}`)})
			events := generate(10, 20, 3)
			e.appendEvents(t, events)

			cfg := esdb.Config{URL: e.url, Processor: b.Proc, Name: "bad-input", Mapping: esdb.Mapping{StreamPrefix: e.prefix}}
			if mode == "Persistent" {
				cfg.Persistent = &esdb.Persistent{Group: "g"}
			}
			r := start(t, cfg)
			count := func(table string) int {
				var n int
				require.NoError(t, b.DB.Pool.QueryRow(t.Context(), `SELECT count(*) FROM `+table).Scan(&n))
				return n
			}
			waitFor(t, r.commits, func() bool {
				return applied(len(events), b.Proc)() && count("rejected") == 2 && count("quarantine") == 1
			}, "good events applied, bad ones rejected, poison quarantined")
			require.NoError(t, r.stop())
			b.RequireFold(t, events)

			rows, err := b.DB.Pool.Query(t.Context(), `SELECT source, aggregate, version, reason, error FROM rejected ORDER BY aggregate`)
			require.NoError(t, err)
			type rej struct {
				Source, Aggregate string
				Version           int64
				Reason, Error     string
			}
			var got []rej
			for rows.Next() {
				var r rej
				require.NoError(t, rows.Scan(&r.Source, &r.Aggregate, &r.Version, &r.Reason, &r.Error))
				got = append(got, r)
			}
			require.NoError(t, rows.Err())
			require.Len(t, got, 2)
			require.Equal(t, rej{"bad-input", "bad-1", 1, "invalid_json", "invalid event: data is not valid JSON"}, got[0])
			require.Equal(t, rej{"bad-input", "bin-1", 1, "invalid_json", "invalid event: content type application/octet-stream is not JSON"}, got[1])

			st := r.src.Stats()
			require.EqualValues(t, 1, st.Skipped)
			require.EqualValues(t, 2, st.Rejected)
			require.EqualValues(t, len(events)+4, st.Received)
			var agg string
			require.NoError(t, b.DB.Pool.QueryRow(t.Context(), `SELECT aggregate FROM quarantine`).Scan(&agg))
			require.Equal(t, "poison-1", agg)
			require.Equal(t, st.Received, st.Acked, "every delivery acknowledged, the bad ones too")
		})
	}
}
