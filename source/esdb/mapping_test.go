package esdb_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/source/esdb"
)

func TestMapping(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("5f0b6a36-9e3c-4a3e-8d5b-3c0a1f2e4d6b")
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := func(stream, typ, contentType string, revision uint64, data, meta string) *esdbc.RecordedEvent {
		return &esdbc.RecordedEvent{EventID: id, StreamID: stream, EventType: typ, ContentType: contentType,
			EventNumber: revision, CreatedDate: at, Data: []byte(data), UserMetadata: []byte(meta)}
	}
	payment := esdb.Mapping{StreamPrefix: "payment-"}

	t.Run("Event", func(t *testing.T) {
		t.Parallel()
		e, err := payment.Map(rec("payment-42", "payment.captured", "application/json", 4, `{"amount":5}`, `{"by":"x"}`))
		require.NoError(t, err)
		require.Equal(t, aggregate.Event{
			ID: id.String(), Aggregate: "42", Version: 5, Type: "payment.captured",
			Data: []byte(`{"amount":5}`), Metadata: []byte(`{"by":"x"}`), RecordedAt: at, ContentType: "application/json",
		}, e)
		require.Equal(t, "payment-42", payment.Stream("42"))

		e, err = esdb.Mapping{}.Map(rec("payment-42", "t", "application/json; charset=utf-8", 0, `{}`, ""))
		require.NoError(t, err)
		require.Equal(t, "payment-42", e.Aggregate, "no prefix: the whole stream name")
		require.Nil(t, e.Metadata)

		_, err = payment.Map(rec("payment-42", "t", "application/vnd.acme+json", 0, `{}`, ""))
		require.NoError(t, err)
	})

	t.Run("Skipped", func(t *testing.T) {
		t.Parallel()
		for _, r := range []*esdbc.RecordedEvent{
			nil, // an unresolved link
			rec("$$payment-42", "$metadata", "application/json", 0, `{}`, ""),
			rec("payment-42", "$>", "application/octet-stream", 0, "0@payment-1", ""),
			rec("$persistentsubscription-x-parked", "$>", "application/octet-stream", 0, "", ""),
			rec("order-1", "order.placed", "application/json", 0, `{}`, ""),
			rec("payment-", "t", "application/json", 0, `{}`, ""),
		} {
			_, err := payment.Map(r)
			require.ErrorIs(t, err, esdb.ErrSkipped, "%+v", r)
		}
	})

	t.Run("Rejected", func(t *testing.T) {
		t.Parallel()
		e, err := payment.Map(rec("payment-42", "t", "application/octet-stream", 2, "\xde\xad", ""))
		var ve *aggregate.ValidationError
		require.True(t, errors.As(err, &ve))
		require.ErrorIs(t, err, aggregate.ErrInvalidJSON)
		require.Equal(t, "content type application/octet-stream is not JSON", ve.Detail)
		require.Equal(t, "42", e.Aggregate, "the reject carries what is known")
		require.Equal(t, int64(3), e.Version)

		// Malformed JSON with a JSON content type is mapped: the
		// processor's validation rejects it.
		_, err = payment.Map(rec("payment-42", "t", "application/json", 0, `{"amount":`, ""))
		require.NoError(t, err)
	})

	t.Run("VersionField", func(t *testing.T) {
		t.Parallel()
		m := esdb.Mapping{StreamPrefix: "payment-", VersionField: "v"}
		e, err := m.Map(rec("payment-42", "t", "application/json", 9, `{}`, `{"v":3,"other":true}`))
		require.NoError(t, err)
		require.Equal(t, int64(3), e.Version)
		e, err = m.Map(rec("payment-42", "t", "application/json", 9, `{}`, `{"v":"4"}`))
		require.NoError(t, err)
		require.Equal(t, int64(4), e.Version)
		for _, meta := range []string{"", `[]`, `{}`, `{"v":0}`, `{"v":1.5}`, `{"v":"x"}`, `not json`} {
			_, err := m.Map(rec("payment-42", "t", "application/json", 9, `{}`, meta))
			require.ErrorIs(t, err, aggregate.ErrBadVersion, "metadata %q", meta)
		}
	})
}

// A payment stream's event as the processor sees it.
func ExampleMapping_Map() {
	m := esdb.Mapping{StreamPrefix: "payment-"}
	e, err := m.Map(&esdbc.RecordedEvent{
		EventID:     uuid.MustParse("5f0b6a36-9e3c-4a3e-8d5b-3c0a1f2e4d6b"),
		StreamID:    "payment-42",
		EventNumber: 0, // the stream's first event
		EventType:   "payment.authorized",
		ContentType: "application/json",
		Data:        []byte(`{"payer":"ann","payee":"bob","amount":1000}`),
	})
	fmt.Println(e.Aggregate, e.Version, e.ID, err)
	fmt.Println(m.Stream(e.Aggregate))

	_, err = m.Map(&esdbc.RecordedEvent{StreamID: "$$payment-42", EventType: "$metadata", ContentType: "application/json"})
	fmt.Println(err)
	// Output:
	// 42 1 5f0b6a36-9e3c-4a3e-8d5b-3c0a1f2e4d6b <nil>
	// payment-42
	// esdb: event skipped: system event $metadata in $$payment-42
}
