package aggregate_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
)

func TestStableID(t *testing.T) {
	t.Parallel()
	e := aggregate.Event{Aggregate: "payment-7", Version: 3}
	require.Equal(t, "payment-7:3", e.StableID())
	e.ID = "4b7f0e1a-0000-4000-8000-000000000000"
	require.Equal(t, e.ID, e.StableID())
}

func TestHash(t *testing.T) {
	t.Parallel()
	a := aggregate.Event{Aggregate: "a", Version: 1, Type: "x", Data: []byte(`{"n":1}`)}
	b := a
	b.Metadata = []byte(`{"delivery":2}`)
	b.ID = "other"
	require.Equal(t, a.Hash(), b.Hash(), "metadata and id are not part of the payload hash")
	c := a
	c.Data = []byte(`{"n":2}`)
	require.NotEqual(t, a.Hash(), c.Hash())
	d := a
	d.Type = "y"
	require.NotEqual(t, a.Hash(), d.Hash())
	require.Len(t, a.Hash(), 16)
}

func TestValidate(t *testing.T) {
	t.Parallel()
	good := aggregate.Event{Aggregate: "a", Version: 1, Type: "t", Data: []byte(`{}`)}
	require.NoError(t, good.Validate(nil))

	big := good
	big.Data = []byte(`"` + strings.Repeat("x", aggregate.DefaultMaxPayload) + `"`)
	cases := []struct {
		name   string
		mutate func(e *aggregate.Event)
		limits *aggregate.Limits
		err    error
		reason string
	}{
		{"EmptyAggregate", func(e *aggregate.Event) { e.Aggregate = "" }, nil, aggregate.ErrEmptyAggregate, "empty_aggregate"},
		{"VersionZero", func(e *aggregate.Event) { e.Version = 0 }, nil, aggregate.ErrBadVersion, "bad_version"},
		{"VersionNegative", func(e *aggregate.Event) { e.Version = -4 }, nil, aggregate.ErrBadVersion, "bad_version"},
		{"EmptyType", func(e *aggregate.Event) { e.Type = "" }, nil, aggregate.ErrEmptyType, "empty_type"},
		{"InvalidJSON", func(e *aggregate.Event) { e.Data = []byte(`{"a":`) }, nil, aggregate.ErrInvalidJSON, "invalid_json"},
		{"EmptyData", func(e *aggregate.Event) { e.Data = nil }, nil, aggregate.ErrInvalidJSON, "invalid_json"},
		{"InvalidMetadata", func(e *aggregate.Event) { e.Metadata = []byte(`nope`) }, nil, aggregate.ErrInvalidMetadata, "invalid_metadata"},
		{"TooLargeDefault", func(e *aggregate.Event) { e.Data = big.Data }, nil, aggregate.ErrPayloadTooLarge, "payload_too_large"},
		{"TooLargeConfigured", func(e *aggregate.Event) { e.Metadata = []byte(`{"k":"0123456789"}`) }, &aggregate.Limits{MaxPayload: 10}, aggregate.ErrPayloadTooLarge, "payload_too_large"},
		{"UnknownType", func(e *aggregate.Event) {}, &aggregate.Limits{Types: []string{"u", "v"}}, aggregate.ErrUnknownType, "unknown_type"},
		{"NULInAggregate", func(e *aggregate.Event) { e.Aggregate = "a\x00b" }, nil, aggregate.ErrInvalidText, "invalid_text"},
		{"InvalidUTF8Aggregate", func(e *aggregate.Event) { e.Aggregate = "a\xffb" }, nil, aggregate.ErrInvalidText, "invalid_text"},
		{"NULInID", func(e *aggregate.Event) { e.ID = "id\x00" }, nil, aggregate.ErrInvalidText, "invalid_text"},
		{"InvalidUTF8Type", func(e *aggregate.Event) { e.Type = "\xc3\x28" }, nil, aggregate.ErrInvalidText, "invalid_text"},
		{"LongAggregate", func(e *aggregate.Event) { e.Aggregate = strings.Repeat("a", aggregate.DefaultMaxAggregateLen+1) }, nil, aggregate.ErrTooLong, "too_long"},
		{"LongID", func(e *aggregate.Event) { e.ID = strings.Repeat("i", 100_000) }, nil, aggregate.ErrTooLong, "too_long"},
		{"LongType", func(e *aggregate.Event) { e.Type = strings.Repeat("t", aggregate.DefaultMaxTypeLen+1) }, nil, aggregate.ErrTooLong, "too_long"},
		{"LongConfigured", func(e *aggregate.Event) { e.Aggregate = "abcde" }, &aggregate.Limits{MaxAggregateLen: 4}, aggregate.ErrTooLong, "too_long"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := good
			c.mutate(&e)
			err := e.Validate(c.limits)
			require.ErrorIs(t, err, c.err)
			var ve *aggregate.ValidationError
			require.True(t, errors.As(err, &ve))
			require.Equal(t, c.reason, ve.Reason())
			require.NotEmpty(t, ve.Detail)
			require.Contains(t, err.Error(), "invalid event")
		})
	}

	t.Run("EveryProblem", func(t *testing.T) {
		t.Parallel()
		// Version 0 with a NUL in the aggregate id, no type and invalid
		// JSON: every rule that fails is reported, the first one's reason
		// is the error's.
		e := aggregate.Event{Aggregate: "x\x00", Version: 0, Data: []byte("{")}
		err := e.Validate(nil)
		var ve *aggregate.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, []error{aggregate.ErrInvalidText, aggregate.ErrBadVersion, aggregate.ErrEmptyType, aggregate.ErrInvalidJSON}, ve.Problems)
		for _, p := range ve.Problems {
			require.ErrorIs(t, err, p)
		}
		require.NotErrorIs(t, err, aggregate.ErrTooLong)
		require.Equal(t, "invalid_text", ve.Reason())
		require.Equal(t, "invalid_text", aggregate.Reason(err))
		require.Equal(t, 4, strings.Count(err.Error(), ";")+1, err.Error())
	})
	t.Run("LongestAccepted", func(t *testing.T) {
		t.Parallel()
		e := good
		e.Aggregate = strings.Repeat("é", aggregate.DefaultMaxAggregateLen/2) // 2 bytes each
		e.ID = strings.Repeat("i", aggregate.DefaultMaxIDLen)
		require.NoError(t, e.Validate(nil))
		l := &aggregate.Limits{MaxAggregateLen: aggregate.MaxKeyLen, MaxIDLen: aggregate.MaxKeyLen, MaxTypeLen: aggregate.MaxKeyLen}
		require.NoError(t, l.Check())
		e.Aggregate = strings.Repeat("a", aggregate.MaxKeyLen)
		require.NoError(t, e.Validate(l))
		require.Error(t, (&aggregate.Limits{MaxIDLen: aggregate.MaxKeyLen + 1}).Check())
		require.Error(t, (&aggregate.Limits{MaxTypeLen: -1}).Check())
	})
	t.Run("LimitDisabled", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, big.Validate(&aggregate.Limits{MaxPayload: -1}))
	})
	t.Run("KnownType", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, good.Validate(&aggregate.Limits{Types: []string{"t"}}))
	})
}

func TestClassify(t *testing.T) {
	t.Parallel()
	require.Equal(t, aggregate.Next, aggregate.Classify(0, 1))
	require.Equal(t, aggregate.Next, aggregate.Classify(3, 4))
	require.Equal(t, aggregate.Future, aggregate.Classify(3, 5))
	require.Equal(t, aggregate.Stale, aggregate.Classify(5, 2))
	require.Equal(t, aggregate.Stale, aggregate.Classify(5, 5))
	require.Equal(t, "future", aggregate.Future.String())
}

func TestNew(t *testing.T) {
	t.Parallel()
	e, err := aggregate.New("p-1", 2, "payment.captured", map[string]int{"amount": 5})
	require.NoError(t, err)
	require.JSONEq(t, `{"amount":5}`, string(e.Data))
	require.Equal(t, "p-1:2", e.StableID())
	_, err = aggregate.New("p-1", 2, "bad", make(chan int))
	require.Error(t, err)
}
