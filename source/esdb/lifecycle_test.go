package esdb_test

import (
	"context"
	"testing"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
)

func TestLifecycle(t *testing.T) {
	t.Parallel()

	// Cancelling Run's context drains: what was received commits, the
	// checkpoint covers it, and the next run resumes exactly after it.
	t.Run("DrainThenResume", func(t *testing.T) {
		t.Parallel()
		e, b, events := appended(t, 11, 100, 10)
		cfg := esdb.Config{
			URL: e.url, Processor: b.Proc, Name: "drain", Workers: 4, BatchSize: 20, MaxWait: time.Hour,
			Mapping: esdb.Mapping{StreamPrefix: e.prefix},
		}
		r := start(t, cfg)
		waitFor(t, r.commits, func() bool { return b.Proc.Counts()["ledger"].Batches >= 3 }, "three batches")
		require.NoError(t, r.stop(), "a graceful stop")
		st := r.src.Stats()
		require.Zero(t, st.InFlight, "everything received was committed")
		require.Equal(t, st.Received, st.Acked)
		require.True(t, st.HasCheckpoint)
		cp, ok := b.checkpoint(t, "drain")
		require.True(t, ok)
		require.Equal(t, st.Checkpoint, cp, "the drain saved the watermark")
		require.Less(t, b.appliedRows(t), len(events), "stopped before the end")
		// MaxWait is an hour: only the drain's flush committed the last
		// partial batches.

		cfg.MaxWait = 0 // the default: a partial batch waits 50 ms
		r2 := start(t, cfg)
		waitFor(t, r2.commits, applied(len(events), b.Proc), "the rest applied")
		require.NoError(t, r2.stop())
		b.RequireFold(t, events)
		require.Zero(t, b.Proc.Counts()["ledger"].Deliveries[projection.Duplicate], "resumed exactly after the checkpoint")
		requireForward(t, append(r.checkpoints(), r2.checkpoints()...))
	})

	// Abort cuts the run short: in-flight work rolls back, Run says so.
	t.Run("Abort", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b := setup(t)
		e.appendEvents(t, generate(12, 50, 10))
		r := start(t, esdb.Config{URL: e.url, Processor: b.Proc, BatchSize: 10, Mapping: esdb.Mapping{StreamPrefix: e.prefix}})
		waitSignal(t, r.commits, "a commit")
		r.src.Abort()
		require.ErrorIs(t, r.stop(), esdb.ErrAborted)
	})

	t.Run("RunOnce", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		b := setup(t)
		src, err := esdb.New(&esdb.Config{URL: e.url, Processor: b.Proc})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 2)
		go func() { done <- src.Run(ctx) }()
		go func() { done <- src.Run(ctx) }()
		// Whichever call comes second fails at once; then the first stops.
		second := <-done
		require.ErrorContains(t, second, "called twice")
		cancel()
		require.NoError(t, <-done)
	})

	t.Run("ConfigValidation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for name, cfg := range map[string]*esdb.Config{
			"nil":            nil,
			"no processor":   {URL: "esdb://localhost:2113?tls=false"},
			"no url":         {Processor: b.Proc},
			"bad url":        {URL: "http://nope", Processor: b.Proc},
			"bad type regex": {URL: "esdb://localhost:2113?tls=false", Processor: b.Proc, TypeRegex: "("},
			"no group":       {URL: "esdb://localhost:2113?tls=false", Processor: b.Proc, Persistent: &esdb.Persistent{}},
			"negative":       {URL: "esdb://localhost:2113?tls=false", Processor: b.Proc, BatchSize: -1},
		} {
			_, err := esdb.New(cfg)
			require.Error(t, err, name)
		}
		cfg, err := esdbc.ParseConnectionString("esdb://localhost:2113?tls=false")
		require.NoError(t, err)
		_, err = esdb.New(&esdb.Config{Client: cfg, Processor: b.Proc, Persistent: &esdb.Persistent{Group: "g", Stream: "$ce-payment"}})
		require.NoError(t, err)
	})
}
