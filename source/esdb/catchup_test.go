package esdb_test

import (
	"fmt"
	"testing"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
	"github.com/inorder/inorder/source/esdb/esdbtest"
)

// lastPosition returns the $all position of a stream's last event.
func (e *env) lastPosition(t testing.TB, stream string) esdbc.Position {
	t.Helper()
	p, _ := e.lastEvent(t, stream)
	return p
}

// The core property through EventStoreDB: a catch-up subscription to $all
// with four partitioned workers builds the in-order fold, history and live
// events alike, with a checkpoint that only moves forward and ends past the
// last event.
func TestCatchUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := setup(t)
	events := generate(1, 300, 10)
	e.appendEvents(t, events[:len(events)/2])
	r := start(t, esdb.Config{
		URL: e.url, Processor: b.Proc, Name: "catch-up", Workers: 4,
		Mapping: esdb.Mapping{StreamPrefix: e.prefix},
	})
	waitSignal(t, r.caughtUp, "caught up")
	e.appendEvents(t, events[len(events)/2:]) // live
	waitFor(t, r.commits, applied(len(events), b.Proc), "every event applied")
	last := events[len(events)-1]
	end := e.lastPosition(t, e.stream(last.Aggregate))
	waitFor(t, r.saved, func() bool { cp, ok := b.checkpoint(t, "catch-up"); return ok && !posLess(cp, end) }, "checkpoint past the last event")
	require.NoError(t, r.stop())

	b.RequireFold(t, events)
	require.Equal(t, len(events), b.appliedRows(t))
	c := b.Proc.Counts()["ledger"]
	require.Zero(t, c.Deliveries[projection.Duplicate], "catch-up delivers once")
	require.Zero(t, c.Deliveries[projection.Parked], "one aggregate stays on one worker, in order")
	require.Greater(t, c.Batches, int64(3))
	require.Less(t, c.Batches, int64(len(events)/10), "batches, not a transaction per event")
	requireForward(t, r.checkpoints())
	st := r.src.Stats()
	cp, _ := b.checkpoint(t, "catch-up")
	require.True(t, st.HasCheckpoint)
	require.Equal(t, cp, st.Checkpoint)
	require.Zero(t, st.InFlight)
	require.EqualValues(t, len(events), st.Received)
	require.EqualValues(t, len(events), st.Acked)
	require.Zero(t, st.Skipped+st.Rejected+st.Nacked+st.Reconnects)
}

// With TrustServerCheckpoints, the server's checkpoints move the watermark
// past filtered-out history and it is saved though no event is processed; a
// restart resumes from there.
func TestCatchUpCheckpointsFilteredHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := setup(t)
	const noise = 320
	noiseStream := func(i int) string { return fmt.Sprintf("noise-%s%d", e.prefix, i%7) }
	for i := range noise {
		e.appendRaw(t, noiseStream(i), esdbc.EventData{EventType: "noise", ContentType: esdbc.ContentTypeJson, Data: []byte(`{}`)})
	}
	target := e.lastPosition(t, noiseStream(noise-64))
	cfg := esdb.Config{
		URL: e.url, Processor: b.Proc, Name: "filtered", CheckpointEvery: 10 * time.Millisecond,
		Mapping: esdb.Mapping{StreamPrefix: e.prefix}, TrustServerCheckpoints: true,
	}
	r := start(t, cfg)
	waitFor(t, r.saved, func() bool { cp, ok := b.checkpoint(t, "filtered"); return ok && !posLess(cp, target) }, "checkpoint past the noise")
	require.NoError(t, r.stop())
	st := r.src.Stats()
	require.Zero(t, st.Received, "the server filtered the noise out")
	require.Zero(t, b.Proc.Counts()["ledger"].Batches, "no batch was needed")
	saved, _ := b.checkpoint(t, "filtered")

	// A restart resumes after the noise and processes what follows.
	events := generate(2, 5, 3)
	e.appendEvents(t, events)
	r2 := start(t, cfg)
	waitFor(t, r2.commits, applied(len(events), b.Proc), "events after the noise")
	require.NoError(t, r2.stop())
	b.RequireFold(t, events)
	cp, _ := b.checkpoint(t, "filtered")
	require.False(t, posLess(cp, saved))
}

// A server that sends a checkpoint at the end of the log when a filtered
// subscription catches up (kurrent-io/KurrentDB#4970): by default the source
// saves only positions of events it received, so the event written next, at
// exactly that position, is not missed after a restart. Trusting the
// server's checkpoints there loses it — which is why that is not the default.
func TestCatchUpServerCheckpointAhead(t *testing.T) {
	t.Parallel()
	for _, trust := range []bool{false, true} {
		t.Run(fmt.Sprintf("TrustServerCheckpoints=%v", trust), func(t *testing.T) {
			t.Parallel()
			srv, err := esdbtest.Start(&esdbtest.Options{CheckpointAtEnd: true})
			require.NoError(t, err)
			t.Cleanup(srv.Close)
			e := newEnvAt(t, srv)
			b := setup(t)
			events := generate(15, 4, 3)
			e.appendEvents(t, events[:len(events)-1])
			cfg := esdb.Config{
				URL: e.url, Processor: b.Proc, Name: "ahead", CheckpointEvery: 10 * time.Millisecond,
				Mapping: esdb.Mapping{StreamPrefix: e.prefix}, TrustServerCheckpoints: trust,
			}
			r := start(t, cfg)
			waitSignal(t, r.caughtUp, "caught up")
			waitFor(t, r.commits, applied(len(events)-1, b.Proc), "the first events applied")
			require.NoError(t, r.stop())

			// Written while the source is down, at the end of the log.
			e.appendEvents(t, events[len(events)-1:])
			r2 := start(t, cfg)
			waitSignal(t, r2.caughtUp, "caught up again")
			if trust {
				require.NoError(t, r2.stop())
				require.EqualValues(t, len(events)-1, b.Proc.Counts()["ledger"].Applied(),
					"resuming from the server's checkpoint skipped the event written there")
				return
			}
			waitFor(t, r2.commits, applied(len(events), b.Proc), "the event written after the restart")
			require.NoError(t, r2.stop())
			b.RequireFold(t, events)
		})
	}
}
