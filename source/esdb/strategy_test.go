package esdb_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
	"github.com/inorder/inorder/source/esdb/esdbtest"
)

func TestPinnedCheckpointsFixed(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"0.0.0":    false, // unknown
		"22.10.5":  false,
		"23.10.7":  false,
		"24.10.13": false,
		"24.10.14": true,
		"24.10.20": true,
		"25.0.0":   false,
		"25.1.4":   false,
		"26.0.2":   false,
		"26.0.3":   true,
		"26.0.10":  true,
		"26.1.0":   true,
		"26.2.0":   true,
		"27.0.0":   true,
	} {
		var sv esdbc.ServerVersion
		_, err := fmt.Sscanf(v, "%d.%d.%d", &sv.Major, &sv.Minor, &sv.Patch)
		require.NoError(t, err)
		require.Equal(t, want, esdb.PinnedCheckpointsFixed(sv), v)
	}
}

func withStrategy(st esdbc.ConsumerStrategy) *esdbc.PersistentSubscriptionSettings {
	s := esdb.DefaultSettings("")
	s.ConsumerStrategyName = st
	return &s
}

// A group the source creates with the default settings gets the Pinned
// strategy on a server that keeps Pinned checkpoints right, RoundRobin (and
// a warning) on others; settings given explicitly are kept (a pinned
// strategy on a server without the fix, with a warning). On Pinned, two
// competing consumers subscribed before the events are written each get
// whole streams, in order: nothing parks.
func TestPersistentStrategyByServerVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version  string
		settings *esdbc.PersistentSubscriptionSettings
		want     esdbc.ConsumerStrategy
		warned   bool
	}{
		{version: "23.10.0", want: esdbc.ConsumerStrategyRoundRobin, warned: true},
		{version: "25.1.4", want: esdbc.ConsumerStrategyRoundRobin, warned: true},
		{version: "26.0.3", want: esdbc.ConsumerStrategyPinned},
		{version: "26.1.0", want: esdbc.ConsumerStrategyPinned},
		{version: "26.1.0", settings: withStrategy(esdbc.ConsumerStrategyRoundRobin), want: esdbc.ConsumerStrategyRoundRobin},
		// Asked for, Pinned is used on any server, with a warning where
		// its checkpoints can be wrong.
		{version: "25.1.4", settings: withStrategy(esdbc.ConsumerStrategyPinned), want: esdbc.ConsumerStrategyPinned, warned: true},
	} {
		name := tc.version
		if tc.settings != nil {
			name += "/explicit-" + string(tc.settings.ConsumerStrategyName)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv, err := esdbtest.Start(&esdbtest.Options{Version: tc.version})
			require.NoError(t, err)
			t.Cleanup(srv.Close)
			e := newEnvAt(t, srv)
			b := setup(t)
			events := generate(7, 40, 6)
			group := "g-" + e.prefix
			warned := newSignal() // only the warnings name KurrentDB#5497
			log := &logSignal{match: "KurrentDB#5497", sig: warned}
			anyCommit := newSignal()
			procs := []*projection.Processor{b.Proc, b.NewProcessor(t)}
			var consumers []*running
			for i, p := range procs {
				consumers = append(consumers, start(t, esdb.Config{
					URL: e.url, Processor: p, Name: fmt.Sprintf("consumer-%d", i),
					Persistent: &esdb.Persistent{Group: group, Settings: tc.settings},
					Workers:    2, BatchSize: 20, MaxWait: 5 * time.Millisecond,
					Mapping: esdb.Mapping{StreamPrefix: e.prefix}, Logger: slog.New(log),
				}, anyCommit))
				waitSignal(t, consumers[i].subscribe, "consumer subscribed")
			}
			e.appendEvents(t, events)
			waitFor(t, anyCommit, applied(len(events), procs...), "every event applied")
			for _, c := range consumers {
				require.NoError(t, c.stop())
			}
			b.RequireFold(t, events)

			info, err := e.client.GetPersistentSubscriptionInfoToAll(context.Background(), group, esdbc.GetPersistentSubscriptionOptions{})
			require.NoError(t, err)
			require.Equal(t, tc.want, info.Settings.ConsumerStrategyName)
			require.Equal(t, tc.warned, len(warned) > 0, "the warning about the server's Pinned checkpoints")
			if tc.want == esdbc.ConsumerStrategyPinned {
				var parked int64
				for _, p := range procs {
					parked += p.Counts()["ledger"].Deliveries[projection.Parked]
				}
				require.Zero(t, parked, "each stream's events reach one consumer, in order")
			}
		})
	}
}
