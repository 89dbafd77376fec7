package esdb_test

import (
	"fmt"
	"testing"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
)

// Gap repair with versions from a metadata field, when the stream's order is
// not the versions' order: a version that is in the stream is found wherever
// it is, never reported missing at the source, and the first occurrence in
// stream order is the one applied (what a catch-up subscription applies).
func TestGapRepairStreamOrder(t *testing.T) {
	t.Parallel()
	// Each case writes one payment's versions in the order given (a
	// version may appear twice: re-sent under a new event id), delivers
	// the versions in deliver to the processor (first occurrences), and
	// expects gap repair to find version 3.
	for _, c := range []struct {
		name    string
		written []int64
		deliver []int64
	}{
		// Versions written 1,3,2,4,5: reading back from the end meets 2
		// before 3.
		{"WrittenOutOfOrder", []int64{1, 3, 2, 4, 5}, []int64{1, 2, 4, 5}},
		// Version 2 re-sent under a new event id at the end of the stream.
		{"ResentUnderNewID", []int64{1, 2, 3, 4, 5, 2}, []int64{1, 2, 4, 5}},
		// Version 3 itself re-sent later: the first one is applied.
		{"MissingVersionResent", []int64{1, 2, 3, 4, 3, 5}, []int64{1, 2, 4, 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			b := setup(t)
			payment := generate(13, 1, 5) // versions 1…5 of one payment
			agg := payment[0].Aggregate
			stream := e.stream(agg)
			first := map[int64]aggregate.Event{}
			for _, v := range c.written {
				ev := payment[v-1]
				ev.ID = uuid.NewString()
				ev.Metadata = []byte(fmt.Sprintf(`{"version":%d}`, v))
				id, err := uuid.Parse(ev.ID)
				require.NoError(t, err)
				e.appendRaw(t, stream, esdbc.EventData{EventID: id, EventType: ev.Type, ContentType: esdbc.ContentTypeJson, Data: ev.Data, Metadata: ev.Metadata})
				if _, ok := first[v]; !ok {
					first[v] = ev
				}
			}
			var deliveries []aggregate.Event
			for _, v := range c.deliver {
				deliveries = append(deliveries, first[v])
			}
			_, err := b.Proc.Process(t.Context(), projection.Batch{Events: deliveries})
			require.NoError(t, err)

			src, err := esdb.New(&esdb.Config{
				URL: e.url, Processor: b.Proc, Name: "repair-order", RepairAfter: time.Hour,
				Mapping: esdb.Mapping{StreamPrefix: e.prefix, VersionField: "version"},
			})
			require.NoError(t, err)
			reps, err := src.RepairNow(t.Context(), nil)
			require.NoError(t, err)
			require.Equal(t, []esdb.Repair{{Aggregate: agg, From: 3, To: 3, Found: 1, Fed: 1, Outcomes: map[string]int{"applied": 1}}}, reps,
				"version 3 is in the stream: found, not missing at the source")

			v, err := b.Proc.Version(t.Context(), "ledger", agg)
			require.NoError(t, err)
			require.Equal(t, int64(5), v, "3 repaired, 4 and 5 drained")
			log, err := b.Proc.OperatorLog(t.Context(), projection.ListOptions{})
			require.NoError(t, err)
			require.Empty(t, log, "no gap recorded as missing at the source")
			applied, err := b.Proc.AppliedLog(t.Context(), projection.ListOptions{Projection: "ledger", Aggregate: agg})
			require.NoError(t, err)
			require.Len(t, applied, 5)
			// The inline ledger's row logs an entry that stands for the id.
			require.Equal(t, projection.InlineEntry(first[3]), applied[2].Entry, "the first version 3 in stream order")
			b.RequireFold(t, payment)
		})
	}
}
