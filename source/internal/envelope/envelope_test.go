package envelope_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/source/internal/envelope"
)

// msg answers header and key specs from maps.
type msg struct {
	headers map[string]string
	key     *string
}

func (m msg) Lookup(s envelope.Spec) (string, bool, string) {
	switch s.Kind {
	case envelope.Header:
		v, ok := m.headers[s.Name]
		return v, ok, "header " + s.Name + " is missing"
	case envelope.Key:
		if m.key == nil {
			return "", false, "the record has no key"
		}
		return *m.key, true, ""
	}
	return "", false, "unsupported"
}

func mustParse(t *testing.T, spec string) envelope.Spec {
	t.Helper()
	s, err := envelope.Parse("part", spec, envelope.Header, envelope.Field, envelope.Key)
	require.NoError(t, err)
	return s
}

func TestParse(t *testing.T) {
	for spec, kind := range map[string]envelope.Kind{
		"header:Inorder-Version": envelope.Header, "field:meta.version": envelope.Field, "key": envelope.Key,
		"subject:-1": envelope.Token, "subject": envelope.Subject,
	} {
		s, err := envelope.Parse("version", spec, envelope.Header, envelope.Field, envelope.Key, envelope.Token, envelope.Subject)
		require.NoError(t, err, spec)
		require.Equal(t, kind, s.Kind, spec)
		require.Equal(t, spec, s.String())
	}
	s, _ := envelope.Parse("version", "field:meta.version", envelope.Field)
	require.Equal(t, []string{"meta", "version"}, s.Path)
	for _, bad := range []string{"", "header:", "field:a..b", "key:x", "subject:0", "subject:x", "payload:x"} {
		_, err := envelope.Parse("version", bad, envelope.Header, envelope.Field, envelope.Key, envelope.Token, envelope.Subject)
		require.Error(t, err, bad)
	}
	_, err := envelope.Parse("aggregate", "subject:2", envelope.Header, envelope.Field, envelope.Key)
	require.EqualError(t, err, `aggregate "subject:2": want header:NAME, field:PATH, key`, "a kind the source does not have")
}

func TestEvent(t *testing.T) {
	key := "pay-1"
	m := envelope.Mapping{
		Aggregate: mustParse(t, "key"), Version: mustParse(t, "header:V"), Type: mustParse(t, "field:type"),
		ID: mustParse(t, "header:Id"), Metadata: mustParse(t, "header:Meta"),
	}
	e, err := m.Event(msg{headers: map[string]string{"V": " 3", "Meta": `{"a":1}`}, key: &key}, []byte(`{"type":"payment.captured","amount":2}`))
	require.NoError(t, err)
	require.Equal(t, aggregate.Event{Aggregate: "pay-1", Version: 3, Type: "payment.captured", Metadata: []byte(`{"a":1}`),
		Data: []byte(`{"type":"payment.captured","amount":2}`)}, e)
	require.Equal(t, "pay-1:3", e.StableID(), "no id header: the id is derived from the fact")

	nested := envelope.Mapping{Aggregate: mustParse(t, "field:meta.agg"), Version: mustParse(t, "field:meta.v")}
	e, err = nested.Event(msg{}, []byte(`{"meta":{"agg":"acc-9","v":12}}`))
	require.NoError(t, err)
	require.Equal(t, "acc-9", e.Aggregate)
	require.EqualValues(t, 12, e.Version)

	for _, c := range []struct {
		name      string
		msg       msg
		data      string
		sentinels []error
		detail    string
	}{
		{"NoKey", msg{headers: map[string]string{"V": "1"}}, `{}`, []error{aggregate.ErrEmptyAggregate}, "the record has no key"},
		{"NoVersion", msg{key: &key}, `{}`, []error{aggregate.ErrBadVersion}, "header V is missing"},
		{"VersionZero", msg{key: &key, headers: map[string]string{"V": "0"}}, `{}`, []error{aggregate.ErrBadVersion}, `header:V is "0", not an integer ≥ 1`},
		{"NotJSON", msg{headers: map[string]string{"V": "x"}}, "\x00{", []error{aggregate.ErrEmptyAggregate, aggregate.ErrBadVersion, aggregate.ErrInvalidJSON}, "data is not valid JSON"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := m.Event(c.msg, []byte(c.data))
			var v *aggregate.ValidationError
			require.ErrorAs(t, err, &v)
			for _, s := range c.sentinels {
				require.True(t, errors.Is(err, s), "%v is %v", err, s)
			}
			require.Contains(t, v.Detail, c.detail)
		})
	}
	e, err = m.Event(msg{key: &key, headers: map[string]string{"V": "-2"}}, []byte(`{}`))
	require.ErrorIs(t, err, aggregate.ErrBadVersion)
	require.EqualValues(t, -2, e.Version, "the bad version is kept, for the rejected table")
	_, err = nested.Event(msg{}, []byte(`[1]`))
	require.ErrorContains(t, err, "the payload is not a JSON object, so it has no field meta.agg")
	require.False(t, errors.Is(err, aggregate.ErrInvalidJSON), "an array is valid JSON")
}
