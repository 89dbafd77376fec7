package esdb_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/inorder/inorder/source/esdb"
)

// runUntilReturn runs a Source made from cfg and returns Run's error, failing
// the test if Run is still retrying after waitTimeout.
func runUntilReturn(t *testing.T, cfg esdb.Config) error {
	t.Helper()
	src, err := esdb.New(&cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(waitTimeout):
		cancel()
		<-done
		t.Fatal("Run kept retrying a subscription the server rejects for good")
		return nil
	}
}

// A subscription the server rejects for good ends Run at once with an error
// that says what to fix; one it rejects for a while is retried.
func TestRejected(t *testing.T) {
	t.Parallel()
	reconnectFast := func(cfg esdb.Config) esdb.Config {
		cfg.ReconnectMin, cfg.ReconnectMax = 10*time.Millisecond, 50*time.Millisecond
		cfg.RepairAfter = -1
		return cfg
	}

	t.Run("GroupMissingNoCreate", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b := setup(t)
		err := runUntilReturn(t, reconnectFast(esdb.Config{
			URL: e.url, Processor: b.Proc, Mapping: esdb.Mapping{StreamPrefix: e.prefix},
			Persistent: &esdb.Persistent{Group: "g-" + e.prefix, Stream: "$ce-" + e.prefix, NoCreate: true},
		}))
		require.ErrorIs(t, err, esdb.ErrRejected)
		require.ErrorContains(t, err, `group "g-`+e.prefix+`" on $ce-`+e.prefix+` does not exist`)
		require.ErrorContains(t, err, "NoCreate")
	})

	for _, c := range []struct {
		name, method string
		code         codes.Code
		persistent   bool
		want         string
	}{
		{"PersistentAccessDenied", "PersistentSubscriptions/Read", codes.PermissionDenied, true, "access denied"},
		{"PersistentUnauthenticated", "PersistentSubscriptions/Read", codes.Unauthenticated, true, "access denied"},
		{"PersistentCreateInvalid", "PersistentSubscriptions/Create", codes.InvalidArgument, true, "invalid"},
		{"PersistentUnsupported", "PersistentSubscriptions/Read", codes.Unimplemented, true, "does not support"},
		{"CatchUpAccessDenied", "Streams/Read", codes.PermissionDenied, false, "access denied"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.needServer(t)
			b := setup(t)
			e.srv.SetError(c.method, status.Error(c.code, "esdbtest: "+c.name))
			cfg := esdb.Config{URL: e.url, Processor: b.Proc, Mapping: esdb.Mapping{StreamPrefix: e.prefix}}
			if c.persistent {
				cfg.Persistent = &esdb.Persistent{Group: "g"}
			}
			err := runUntilReturn(t, reconnectFast(cfg))
			require.ErrorIs(t, err, esdb.ErrRejected)
			require.ErrorContains(t, err, c.want)
			require.ErrorContains(t, err, "esdbtest: "+c.name, "the server's own message is kept")
		})
	}

	// Unavailable, then the node answers again: the source retried all
	// along and consumes once it may.
	t.Run("TransientRetried", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		e.needServer(t)
		b := setup(t)
		events := generate(14, 20, 3)
		e.appendEvents(t, events)
		e.srv.SetError("PersistentSubscriptions/Read", status.Error(codes.Unavailable, "esdbtest: try later"))
		reconnecting := newSignal()
		cfg := reconnectFast(esdb.Config{
			URL: e.url, Processor: b.Proc, Mapping: esdb.Mapping{StreamPrefix: e.prefix},
			Persistent: &esdb.Persistent{Group: "g"},
			Logger:     slog.New(&logSignal{match: "reconnecting", sig: reconnecting}),
		})
		r := start(t, cfg)
		waitSignal(t, reconnecting, "a failed attempt")
		waitSignal(t, reconnecting, "another failed attempt")
		e.srv.SetError("PersistentSubscriptions/Read", nil)
		waitFor(t, r.commits, applied(len(events), b.Proc), "every event applied")
		require.NoError(t, r.stop(), "Run did not give up on a transient error")
		b.RequireFold(t, events)
	})
}
