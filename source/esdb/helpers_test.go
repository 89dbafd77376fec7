package esdb_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/runtest"
	"github.com/inorder/inorder/source/esdb"
	"github.com/inorder/inorder/source/esdb/esdbtest"
)

// waitTimeout bounds every wait of these tests.
const waitTimeout = 60 * time.Second

// env is the EventStoreDB of one test: the in-process server, or the real
// node at ESDB_URL.
type env struct {
	url    string
	srv    *esdbtest.Server // nil against a real node
	client *esdbc.Client
	// prefix is the test's own stream prefix, such as "t1a2b3c4d-pay-":
	// streams are prefix + aggregate id.
	prefix string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	if u := os.Getenv("ESDB_URL"); u != "" {
		return newEnvURL(t, u, nil)
	}
	return newEnvAt(t, esdbtest.New(t))
}

// newEnvAt is newEnv on a given in-process server, whatever ESDB_URL says.
func newEnvAt(t testing.TB, srv *esdbtest.Server) *env {
	t.Helper()
	return newEnvURL(t, srv.URL(), srv)
}

func newEnvURL(t testing.TB, url string, srv *esdbtest.Server) *env {
	t.Helper()
	e := &env{prefix: "t" + strings.ReplaceAll(uuid.NewString(), "-", "")[:10] + "-", url: url, srv: srv}
	cfg, err := esdbc.ParseConnectionString(e.url)
	require.NoError(t, err)
	cfg.Logger = esdbc.NoopLogging()
	e.client, err = esdbc.NewClient(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.client.Close() })
	return e
}

// needServer skips tests that inject faults into the in-process server.
func (e *env) needServer(t testing.TB) {
	t.Helper()
	if e.srv == nil {
		t.Skip("injects faults into the in-process server; ESDB_URL is set")
	}
}

func (e *env) stream(agg string) string { return e.prefix + agg }

// appendEvents appends events, in order, each to its aggregate's stream as
// JSON, with expected revision version-2 so a retried append cannot
// duplicate an event.
func (e *env) appendEvents(t testing.TB, events []aggregate.Event) {
	t.Helper()
	ctx := context.Background()
	for _, ev := range events {
		data := esdbc.EventData{EventType: ev.Type, ContentType: esdbc.ContentTypeJson, Data: ev.Data, Metadata: ev.Metadata}
		var exp esdbc.ExpectedRevision = esdbc.NoStream{}
		if ev.Version > 1 {
			exp = esdbc.Revision(uint64(ev.Version - 2))
		}
		if e.srv != nil {
			// The in-process server's direct path: much faster under -race.
			_, err := e.srv.Append(e.stream(ev.Aggregate), esdbtest.Event{Type: ev.Type, Data: ev.Data, Metadata: ev.Metadata})
			require.NoError(t, err)
			continue
		}
		_, err := e.client.AppendToStream(ctx, e.stream(ev.Aggregate), esdbc.AppendToStreamOptions{ExpectedRevision: exp}, data)
		require.NoError(t, err)
	}
}

// appendRaw appends one event as given, through the client.
func (e *env) appendRaw(t testing.TB, stream string, data esdbc.EventData) {
	t.Helper()
	_, err := e.client.AppendToStream(context.Background(), stream, esdbc.AppendToStreamOptions{}, data)
	require.NoError(t, err)
}

// bundle is one test's schema, processor and ledger projection.
type bundle struct{ *ledgertest.Bundle }

func setup(t testing.TB) *bundle { return &bundle{ledgertest.New(t)} }

// appliedRows counts the events applied: the sum of the payments'
// versions (the inline ledger's fast path writes no version rows).
func (b *bundle) appliedRows(t testing.TB) int { return b.AppliedVersions(t) }

// checkpoint reads a source's checkpoint row.
func (b *bundle) checkpoint(t testing.TB, name string) (esdbc.Position, bool) {
	t.Helper()
	raw, ok, err := b.Proc.LoadCheckpoint(context.Background(), name)
	require.NoError(t, err)
	if !ok {
		return esdbc.Position{}, false
	}
	var p esdbc.Position
	_, err = fmt.Sscanf(string(raw), "C:%20d/P:%20d", &p.Commit, &p.Prepare)
	require.NoError(t, err, "an $all position: %q", raw)
	return p, true
}

// notifier is a coalescing "something happened" channel.
type notifier = runtest.Signal

var newSignal = runtest.NewSignal

// waitFor re-checks cond each time sig fires until it holds.
func waitFor(t testing.TB, sig notifier, cond func() bool, what string) {
	t.Helper()
	runtest.WaitFor(t, sig, waitTimeout, cond, what)
}

// waitSignal waits for sig to fire.
func waitSignal(t testing.TB, sig notifier, what string) {
	t.Helper()
	select {
	case <-sig:
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// running is a Source running in the background, with test signals.
type running struct {
	src       *esdb.Source
	bg        *runtest.Background
	commits   notifier // each committed batch
	saved     notifier // each checkpoint saved
	caughtUp  notifier
	subscribe notifier
	repairs   notifier

	mu         sync.Mutex
	checkpoint []esdbc.Position // checkpoints saved, in order
	cpChanged  chan struct{}    // closed and replaced when a checkpoint is saved
	repaired   []esdb.Repair
}

// start runs a Source made from cfg (hooks are added) until the test ends.
// Each committed batch also notifies the extra signals.
func start(t testing.TB, cfg esdb.Config, extra ...notifier) *running {
	t.Helper()
	r := &running{cpChanged: make(chan struct{}), commits: newSignal(), saved: newSignal(), caughtUp: newSignal(), subscribe: newSignal(), repairs: newSignal()}
	cfg.OnCommit = func(c esdb.Commit) {
		r.commits.Notify()
		for _, s := range extra {
			s.Notify()
		}
	}
	cfg.OnCheckpoint = func(p esdbc.Position) {
		r.mu.Lock()
		r.checkpoint = append(r.checkpoint, p)
		close(r.cpChanged)
		r.cpChanged = make(chan struct{})
		r.mu.Unlock()
		r.saved.Notify()
	}
	cfg.OnCaughtUp = r.caughtUp.Notify
	cfg.OnSubscribed = r.subscribe.Notify
	cfg.OnRepair = func(rp esdb.Repair) {
		r.mu.Lock()
		r.repaired = append(r.repaired, rp)
		r.mu.Unlock()
		r.repairs.Notify()
	}
	if cfg.URL == "" {
		t.Fatal("start: no URL")
	}
	src, err := esdb.New(&cfg)
	require.NoError(t, err)
	r.src = src
	r.bg = runtest.Start(t, src, waitTimeout, esdb.ErrAborted)
	return r
}

// stop drains the source and returns Run's error.
func (r *running) stop() error { return r.bg.Stop() }

// waitCheckpoint waits until the saved checkpoint reaches p. Any number of
// goroutines may wait at once.
func (r *running) waitCheckpoint(ctx context.Context, p esdbc.Position) error {
	for {
		r.mu.Lock()
		reached := len(r.checkpoint) > 0 && !posLess(r.checkpoint[len(r.checkpoint)-1], p)
		changed := r.cpChanged
		r.mu.Unlock()
		if reached {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *running) repairsSoFar() []esdb.Repair {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]esdb.Repair(nil), r.repaired...)
}

func (r *running) checkpoints() []esdbc.Position {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]esdbc.Position(nil), r.checkpoint...)
}

// requireForward asserts that positions never move back.
func requireForward(t testing.TB, ps []esdbc.Position) {
	t.Helper()
	for i := 1; i < len(ps); i++ {
		require.False(t, posLess(ps[i], ps[i-1]), "checkpoint moved back: %v then %v", ps[i-1], ps[i])
	}
}

func posLess(a, b esdbc.Position) bool {
	return a.Commit < b.Commit || (a.Commit == b.Commit && a.Prepare < b.Prepare)
}

// applied returns a condition: the processors applied n events in all;
// generate returns a ledger stream.
var applied, generate = ledgertest.Applied, ledgertest.Generate
