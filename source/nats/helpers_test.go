package nats_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	natsc "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/runtest"
	"github.com/inorder/inorder/source/nats"
	"github.com/inorder/inorder/source/nats/natstest"
)

// waitTimeout bounds every wait of these tests.
const waitTimeout = 90 * time.Second

// env is one test's stream on a NATS server (or cluster).
type env struct {
	url     string
	nc      *natsc.Conn
	js      jetstream.JetStream
	stream  string
	subject string // prefix: events go to subject + "." + aggregate
}

// onServer starts a NATS server of the test's own and returns it with an
// env on it (one replica) and a bundle.
func onServer(t testing.TB) (*natstest.Server, *env, *bundle) {
	t.Helper()
	srv := natstest.New(t)
	return srv, newEnv(t, srv.URL(), 1), setup(t)
}

// newEnv creates a stream of its own on the server(s) at url, with
// replicas copies.
func newEnv(t testing.TB, url string, replicas int) *env {
	t.Helper()
	e := &env{url: url, stream: "T" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]}
	e.subject = strings.ToLower(e.stream)
	nc, err := natsc.Connect(url, natsc.MaxReconnects(-1), natsc.ReconnectWait(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	e.nc = nc
	e.js, err = jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for {
		// A cluster just started may not count every peer online yet ("no
		// suitable peers for placement", seen under load): wait for it.
		_, err = e.js.CreateStream(ctx, jetstream.StreamConfig{
			Name: e.stream, Subjects: []string{e.subject + ".>"}, Replicas: replicas, Storage: jetstream.FileStorage,
		})
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeNoPeers || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err)
	return e
}

// errCodeNoPeers is JetStream's "no suitable peers for placement" (the
// server's JSClusterNoPeersErrF), which nats.go names no constant for.
const errCodeNoPeers jetstream.ErrorCode = 10005

func (e *env) subjectOf(ev aggregate.Event) string { return e.subject + "." + ev.Aggregate }

// publish publishes events with the package's helper and returns how many
// the stream stored as new.
func (e *env) publish(t testing.TB, events []aggregate.Event) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	n, err := nats.PublishAll(ctx, e.js, e.subjectOf, events)
	require.NoError(t, err)
	return n
}

// config is a Source config for the env's stream on bundle b.
func (e *env) config(b *bundle) nats.Config {
	return nats.Config{
		URL: e.url, Stream: e.stream, Processor: b.Proc,
		Workers: 4, BatchSize: 50, MaxWait: 5 * time.Millisecond, LagEvery: -1,
	}
}

// consumerInfo returns the consumer's state.
func (e *env) consumerInfo(t testing.TB, name string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := e.js.Consumer(ctx, e.stream, name)
	require.NoError(t, err)
	ci, err := c.Info(ctx)
	require.NoError(t, err)
	return ci
}

// newPool opens a pool on url, closed when the test ends.
func newPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// bundle is one test's schema, processor and ledger projection.
type bundle struct{ *ledgertest.Bundle }

func setup(t testing.TB) *bundle { return &bundle{ledgertest.New(t)} }

// count runs a count query on the bundle's schema.
func (b *bundle) count(t testing.TB, query string) int {
	t.Helper()
	var n int
	require.NoError(t, b.DB.Pool.QueryRow(context.Background(), query).Scan(&n))
	return n
}

// notifier is a coalescing "something happened" channel.
type notifier = runtest.Signal

var newSignal = runtest.NewSignal

// ticks returns a signal that fires every d until the test ends, for
// conditions that no hook signals (a count of the server's).
var ticks = runtest.Ticks

// waitFor re-checks cond each time sig fires (or every poll, for
// conditions no signal covers) until it holds.
func waitFor(t testing.TB, sig notifier, cond func() bool, what string) {
	t.Helper()
	runtest.WaitFor(t, sig, waitTimeout, cond, what)
}

// running is a Source running in the background.
type running struct {
	src     *nats.Source
	bg      *runtest.Background
	commits notifier
	subs    notifier
}

// start runs a Source made from cfg until the test ends; each committed
// batch notifies commits and the extra signals.
func start(t testing.TB, cfg nats.Config, extra ...notifier) *running {
	t.Helper()
	r := &running{commits: newSignal(), subs: newSignal()}
	prev := cfg.OnCommit
	cfg.OnCommit = func(c nats.Commit) {
		if prev != nil {
			prev(c)
		}
		r.commits.Notify()
		for _, s := range extra {
			s.Notify()
		}
	}
	cfg.OnSubscribed = r.subs.Notify
	src, err := nats.New(&cfg)
	require.NoError(t, err)
	r.src = src
	r.bg = runtest.Start(t, src, waitTimeout, nats.ErrAborted)
	return r
}

// stop drains the source and returns Run's error.
func (r *running) stop() error { return r.bg.Stop() }

// applied returns a condition: the processors applied n events in all;
// generate returns a ledger stream.
var applied, generate = ledgertest.Applied, ledgertest.Generate

// hostile returns the stream shuffled, with about a third of its events
// repeated later (as a producer that republishes would): the order and the
// duplication the gate must absorb.
func hostile(seed uint64, events []aggregate.Event) []aggregate.Event {
	rng := rand.New(rand.NewPCG(seed, seed+3))
	out := append([]aggregate.Event(nil), events...)
	for _, e := range events {
		if rng.IntN(3) == 0 {
			out = append(out, e)
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
