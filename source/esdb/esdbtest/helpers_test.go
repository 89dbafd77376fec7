package esdbtest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/inorder/inorder/source/esdb/esdbtest"
	"github.com/stretchr/testify/require"
)

const waitTimeout = 5 * time.Second

func newClientURL(t *testing.T, url string) *esdb.Client {
	t.Helper()
	cfg, err := esdb.ParseConnectionString(url)
	require.NoError(t, err)
	cfg.Logger = esdb.NoopLogging()
	c, err := esdb.NewClient(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newClient(t *testing.T, s *esdbtest.Server) *esdb.Client {
	t.Helper()
	return newClientURL(t, s.URL())
}

// serverClient starts a server of the test's own (esdbtest.New) and
// returns it with a client of it.
func serverClient(t *testing.T) (*esdbtest.Server, *esdb.Client) {
	t.Helper()
	s := esdbtest.New(t)
	return s, newClient(t, s)
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func jsonEvent(typ, data string) esdb.EventData {
	return esdb.EventData{EventType: typ, ContentType: esdb.ContentTypeJson, Data: []byte(data)}
}

func esdbCode(t *testing.T, err error) esdb.ErrorCode {
	t.Helper()
	var e *esdb.Error
	require.True(t, errors.As(err, &e), "not an *esdb.Error: %v", err)
	return e.Code()
}

// readAll drains a ReadStream.
func readAll(t *testing.T, rs *esdb.ReadStream, err error) ([]*esdb.ResolvedEvent, error) {
	t.Helper()
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []*esdb.ResolvedEvent
	for {
		ev, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

func readStream(t *testing.T, c *esdb.Client, stream string, opts esdb.ReadStreamOptions, count uint64) ([]*esdb.ResolvedEvent, error) {
	t.Helper()
	rs, err := c.ReadStream(ctxT(t), stream, opts, count)
	return readAll(t, rs, err)
}

func revisions(evs []*esdb.ResolvedEvent) []uint64 {
	out := make([]uint64, len(evs))
	for i, ev := range evs {
		out[i] = ev.OriginalEvent().EventNumber
	}
	return out
}

func seed(t *testing.T, s *esdbtest.Server, stream string, n int) {
	t.Helper()
	for i := range n {
		_, err := s.Append(stream, esdbtest.Event{Type: "Seeded", Data: []byte(fmt.Sprintf(`{"i":%d}`, i))})
		require.NoError(t, err)
	}
}

// pump turns a blocking Recv into a channel, closed after a drop.
func pump[T any](recv func() *T, dropped func(*T) bool) <-chan *T {
	ch := make(chan *T, 1024)
	go func() {
		defer close(ch)
		for {
			ev := recv()
			ch <- ev
			if dropped(ev) {
				return
			}
		}
	}()
	return ch
}

func next[T any](t *testing.T, ch <-chan *T) *T {
	t.Helper()
	select {
	case ev, ok := <-ch:
		require.True(t, ok, "subscription channel closed")
		return ev
	case <-time.After(waitTimeout):
		t.Fatal("timed out waiting for a subscription message")
		return nil
	}
}

// nothingWithin asserts that no message arrives for d.
func nothingWithin[T any](t *testing.T, ch <-chan *T, d time.Duration) {
	t.Helper()
	select {
	case ev := <-ch:
		t.Fatalf("unexpected message: %+v", ev)
	case <-time.After(d):
	}
}

func subEvents(sub *esdb.Subscription) <-chan *esdb.SubscriptionEvent {
	return pump(sub.Recv, func(e *esdb.SubscriptionEvent) bool { return e.SubscriptionDropped != nil })
}

func psEvents(sub *esdb.PersistentSubscription) <-chan *esdb.PersistentSubscriptionEvent {
	return pump(sub.Recv, func(e *esdb.PersistentSubscriptionEvent) bool { return e.SubscriptionDropped != nil })
}

// nextEvent skips checkpoints and caught-up messages.
func nextEvent(t *testing.T, ch <-chan *esdb.SubscriptionEvent) *esdb.ResolvedEvent {
	t.Helper()
	for {
		ev := next(t, ch)
		require.Nil(t, ev.SubscriptionDropped)
		if ev.EventAppeared != nil {
			return ev.EventAppeared
		}
	}
}

func nextPS(t *testing.T, ch <-chan *esdb.PersistentSubscriptionEvent) *esdb.EventAppeared {
	t.Helper()
	ev := next(t, ch)
	require.Nil(t, ev.SubscriptionDropped, "dropped: %v", ev.SubscriptionDropped)
	require.NotNil(t, ev.EventAppeared)
	return ev.EventAppeared
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
