package nats_test

import (
	"context"
	"testing"

	natsc "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/source/nats"
	"github.com/inorder/inorder/source/nats/natstest"
)

// TestPublishAllUnderClientLimit: PublishAll on a client that allows fewer
// publishes in flight (PublishAsyncMaxPending) than PublishAll keeps
// stores every event once, and a second publication of the same events is
// absorbed by the duplicate window. (The "stalled" error PublishAll now
// absorbs needs acks slower than the client's stall wait, 200 ms: seen in
// natse2e on a loaded machine, not reproduced here.)
func TestPublishAllUnderClientLimit(t *testing.T) {
	t.Parallel()
	srv := natstest.New(t)
	e := newEnv(t, srv.URL(), 1)
	nc, err := natsc.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(64))
	require.NoError(t, err)
	events := generate(5, 500, 6)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	n, err := nats.PublishAll(ctx, js, e.subjectOf, events)
	require.NoError(t, err)
	require.Equal(t, len(events), n, "every event stored once")
	n, err = nats.PublishAll(ctx, js, e.subjectOf, events[:500])
	require.NoError(t, err)
	require.Zero(t, n, "the copies are duplicates the stream drops")
	info, err := e.js.Stream(ctx, e.stream)
	require.NoError(t, err)
	require.EqualValues(t, len(events), info.CachedInfo().State.Msgs)
}
