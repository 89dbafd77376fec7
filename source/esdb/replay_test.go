package esdb_test

import (
	"context"
	"errors"
	"testing"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
)

func TestReplayer(t *testing.T) {
	t.Parallel()

	// A rebuild from $all: the projection's events are replayed in order
	// per aggregate, other streams and types are skipped, and the read
	// model equals the in-order fold.
	t.Run("Rebuild", func(t *testing.T) {
		t.Parallel()
		e, b, events := appended(t, 20, 40, 6)
		e.appendRaw(t, "other-"+e.prefix, esdbc.EventData{EventType: "noise", ContentType: esdbc.ContentTypeJson, Data: []byte(`{}`)})
		e.appendRaw(t, e.stream("pay-noise"), esdbc.EventData{EventType: "noise", ContentType: esdbc.ContentTypeJson, Data: []byte(`{}`)})
		// The read model is wrong before the rebuild.
		_, err := b.Proc.Process(t.Context(), projection.Batch{Events: events[:len(events)/3]})
		require.NoError(t, err)
		_, err = b.DB.Pool.Exec(t.Context(), `UPDATE ledger_balances SET balance = balance + 1`)
		require.NoError(t, err)

		r, err := esdb.NewReplayer(&esdb.Config{
			URL: e.url, Mapping: esdb.Mapping{StreamPrefix: e.prefix}, TypeRegex: "^payment\\.",
			Workers: 3, BatchSize: 7,
		})
		require.NoError(t, err)
		var emitted int64
		_, err = b.Proc.Build(t.Context(), "ledger", &projection.BuildOptions{InPlace: true, Replay: r.Replay,
			Progress: func(p projection.BuildProgress) { emitted = p.Events },
		})
		require.NoError(t, err)
		b.RequireFold(t, events)
		require.EqualValues(t, len(events), emitted)
		p := r.Progress()
		require.EqualValues(t, len(events), p.Read-p.Skipped, "every event of the prefix and types emitted, the others skipped")
		require.GreaterOrEqual(t, p.Skipped, int64(2))
		require.InDelta(t, 1.0, p.Fraction, 1e-9)
	})

	// The first error of emit stops the replay and is returned.
	t.Run("EmitError", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.appendEvents(t, generate(21, 20, 3))
		r, err := esdb.NewReplayer(&esdb.Config{URL: e.url, Mapping: esdb.Mapping{StreamPrefix: e.prefix}, BatchSize: 2})
		require.NoError(t, err)
		boom := errors.New("boom")
		err = r.Replay(t.Context(), func(context.Context, []aggregate.Event) error { return boom })
		require.ErrorIs(t, err, boom)
	})

	t.Run("BadConfig", func(t *testing.T) {
		t.Parallel()
		_, err := esdb.NewReplayer(&esdb.Config{URL: "esdb://localhost:2113?tls=false", TypeRegex: "("})
		require.ErrorContains(t, err, "TypeRegex")
		_, err = esdb.NewReplayer(&esdb.Config{})
		require.Error(t, err, "a URL or Client is required")
	})
}
