package nats_test

import (
	"errors"
	"testing"

	natsc "github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/source/nats"
)

// TestMapping: the NATS specs (headers, payload fields, subject tokens, the
// whole subject) map a message to an event, and a message that cannot be
// one is an *aggregate.ValidationError with a typed reason: the rules and
// the wording of source/internal/envelope, which the Kafka source shares.
func TestMapping(t *testing.T) {
	msg, err := nats.NewMsg("orders.acc-1", aggregate.Event{Aggregate: "acc-1", Version: 2, Type: "opened", Data: []byte(`{}`), Metadata: []byte(`{ "a": 1 }`)})
	require.NoError(t, err)
	e, err := nats.Mapping{}.Map(msg.Subject, msg.Header, msg.Data)
	require.NoError(t, err)
	require.Equal(t, aggregate.Event{ID: "acc-1:2", Aggregate: "acc-1", Version: 2, Type: "opened", Data: []byte(`{}`), Metadata: []byte(`{"a":1}`)}, e)

	bySubject := nats.Mapping{Aggregate: "subject:2", Version: "field:meta.v", Type: "subject", ID: "field:id"}
	e, err = bySubject.Map("orders.acc-9", nil, []byte(`{"meta":{"v":"12"},"id":7}`))
	require.NoError(t, err)
	require.Equal(t, aggregate.Event{ID: "7", Aggregate: "acc-9", Version: 12, Type: "orders.acc-9", Data: []byte(`{"meta":{"v":"12"},"id":7}`)}, e)

	for _, c := range []struct {
		name      string
		subject   string
		data      string
		sentinels []error
		detail    string
		version   int64
	}{
		{"NoToken", "orders", `{"meta":{"v":1}}`, []error{aggregate.ErrEmptyAggregate}, "subject orders has no token 2", 1},
		{"VersionZero", "orders.a", `{"meta":{"v":0}}`, []error{aggregate.ErrBadVersion}, `field:meta.v is "0", not an integer ≥ 1`, 0},
		{"VersionNegative", "orders.a", `{"meta":{"v":-2}}`, []error{aggregate.ErrBadVersion}, `field:meta.v is "-2", not an integer ≥ 1`, -2},
		{"NoField", "orders.a", `{"meta":{}}`, []error{aggregate.ErrBadVersion}, "the payload has no field meta.v", 0},
		{"Null", "orders.a", `null`, []error{aggregate.ErrBadVersion}, "the payload is not a JSON object, so it has no field meta.v", 0},
		{"Array", "orders.a", `[1]`, []error{aggregate.ErrBadVersion}, "the payload is not a JSON object, so it has no field meta.v", 0},
		{"NotJSON", "orders.a", `{"meta"`, []error{aggregate.ErrBadVersion, aggregate.ErrInvalidJSON}, "the payload is not a JSON object, so it has no field meta.v; data is not valid JSON", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := bySubject.Map(c.subject, nil, []byte(c.data))
			var v *aggregate.ValidationError
			require.ErrorAs(t, err, &v)
			var got []error
			for _, s := range []error{aggregate.ErrEmptyAggregate, aggregate.ErrBadVersion, aggregate.ErrInvalidJSON} {
				if errors.Is(err, s) {
					got = append(got, s)
				}
			}
			require.Equal(t, c.sentinels, got)
			require.Equal(t, c.detail, v.Detail)
			require.Equal(t, c.version, e.Version, "a bad integer version is kept, for the rejected table")
		})
	}

	_, err = nats.Mapping{}.Map("orders.a", natsc.Header{}, []byte(`{}`))
	require.ErrorIs(t, err, aggregate.ErrEmptyAggregate)
	require.ErrorIs(t, err, aggregate.ErrBadVersion)
	require.ErrorContains(t, err, "header Inorder-Aggregate is missing; header Inorder-Version is missing")

	_, err = nats.Mapping{Aggregate: "key", Type: "header:"}.Map("s", nil, nil)
	require.EqualError(t, err, `nats: Mapping.Aggregate "key": want header:NAME, field:PATH, subject:N`+"\n"+
		`nats: Mapping.Type "header:": want header:NAME, field:PATH, subject:N, subject`)
	_, err = nats.Mapping{Version: "subject"}.Map("s", nil, nil)
	require.EqualError(t, err, `nats: Mapping.Version "subject": want header:NAME, field:PATH, subject:N`)
}
