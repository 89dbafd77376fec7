package esdb_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
)

// logSignal is a slog handler that notifies when a record's message
// contains match: tests wait on the source's own reports.
type logSignal struct {
	match string
	sig   notifier
}

func (h *logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h *logSignal) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.sig.Notify()
	}
	return nil
}
func (h *logSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logSignal) WithGroup(string) slog.Handler      { return h }

// The server drops the subscription, restarts, or is down when the source
// starts: the source reconnects (with a new client) and resubscribes;
// nothing is lost and nothing is applied twice.
func TestReconnect(t *testing.T) {
	t.Parallel()
	// h drives one flow: start the source, append the second half of the
	// stream, wait until n events are applied, and the source's
	// "reconnecting" log records.
	type harness struct {
		start, appendRest func()
		waitApplied       func(n int)
		reconnecting      notifier
	}
	type flow struct {
		name string
		run  func(t *testing.T, e *env, h harness)
	}
	flows := []flow{
		{"DropSubscriptions", func(t *testing.T, e *env, h harness) {
			h.start()
			h.waitApplied(100)
			drain(h.reconnecting)
			e.srv.DropSubscriptions()
			waitSignal(t, h.reconnecting, "reconnecting")
			h.appendRest()
		}},
		{"StopRestart", func(t *testing.T, e *env, h harness) {
			h.start()
			h.waitApplied(100)
			drain(h.reconnecting)
			e.srv.Stop()
			h.appendRest() // written while the node is down
			waitSignal(t, h.reconnecting, "reconnecting")
			waitSignal(t, h.reconnecting, "reconnecting again") // a failed attempt while down
			require.NoError(t, e.srv.Restart())
		}},
		{"DownAtStart", func(t *testing.T, e *env, h harness) {
			e.srv.Stop()
			h.appendRest()
			h.start()
			waitSignal(t, h.reconnecting, "a failed attempt")
			require.NoError(t, e.srv.Restart())
		}},
		{"UnavailableAtStart", func(t *testing.T, e *env, h harness) {
			e.srv.SetUnavailable(true)
			h.appendRest()
			h.start()
			waitSignal(t, h.reconnecting, "a failed attempt")
			waitSignal(t, h.reconnecting, "another failed attempt")
			e.srv.SetUnavailable(false)
		}},
	}
	for _, mode := range []string{"CatchUp", "Persistent"} {
		for _, f := range flows {
			t.Run(mode+"/"+f.name, func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				e.needServer(t)
				b := setup(t)
				events := generate(6, 60, 8)
				half := len(events) / 2
				e.appendEvents(t, events[:half])
				reconnecting := &logSignal{match: "reconnecting", sig: newSignal()}
				cfg := esdb.Config{
					// One discovery attempt: a failed connection shows at once.
					URL: e.url + "&maxDiscoverAttempts=1&discoveryInterval=10", Processor: b.Proc, Name: "reconnect",
					Logger:       slog.New(reconnecting),
					ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
					BatchSize: 50, MaxWait: 5 * time.Millisecond,
					Mapping: esdb.Mapping{StreamPrefix: e.prefix},
				}
				if mode == "Persistent" {
					cfg.Persistent = &esdb.Persistent{Group: "g", Settings: psSettings(esdbc.ConsumerStrategyRoundRobin), BufferSize: 50}
				}
				var r *running
				commits := newSignal()
				f.run(t, e, harness{
					start:      func() { r = start(t, cfg, commits) },
					appendRest: func() { e.appendEvents(t, events[half:]) },
					waitApplied: func(n int) {
						waitFor(t, commits, applied(n, b.Proc), "events applied")
					},
					reconnecting: reconnecting.sig,
				})
				waitFor(t, commits, applied(len(events), b.Proc), "every event applied")
				require.NoError(t, r.stop())

				b.RequireFold(t, events)
				require.Equal(t, len(events), b.appliedRows(t))
				c := b.Proc.Counts()["ledger"]
				require.EqualValues(t, len(events), c.Applied(), "each event applied once")
				st := r.src.Stats()
				require.Positive(t, st.Reconnects)
				if mode == "CatchUp" {
					require.Zero(t, c.Deliveries[projection.Duplicate], "resumed exactly after the committed checkpoint")
					requireForward(t, r.checkpoints())
				}
			})
		}
	}
}

// drain empties a notifier.
func drain(n notifier) {
	select {
	case <-n:
	default:
	}
}
