package effects_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/streamtest"
	"github.com/inorder/inorder/projection"
)

// TestOperator covers listing, stats, cancel and retry, and what each
// refuses.
func TestOperator(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{config: func(c *effects.Config) { c.Workers = 1 }})
	ctx := t.Context()

	_, err := b.fx.Get(ctx, "nope")
	require.ErrorIs(t, err, effects.ErrNotFound)
	_, err = b.fx.Retry(ctx, "nope")
	require.ErrorIs(t, err, effects.ErrNotFound)

	keys := b.record(t, intent(t, kindNotify, "a"), intent(t, kindNotify, "b"), intent(t, kindChecked, "c"))
	kA, kB, kC := keys[0], keys[1], keys[2]
	stats, err := b.fx.Stats(ctx)
	require.NoError(t, err)
	require.Len(t, stats, 2)
	require.Equal(t, int64(2), stats[0].Pending)
	require.Equal(t, int64(1), stats[1].Pending)
	require.False(t, stats[0].OldestPending.IsZero())
	require.Greater(t, stats[0].OldestPendingAge(time.Now().Add(time.Minute)), 59*time.Second)

	list, err := b.fx.List(ctx, projection.ListOptions{Kind: kindNotify})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{kA, kB}, effectKeys(list))
	list, err = b.fx.List(ctx, projection.ListOptions{State: string(effects.Pending), Projection: "notifier", Limit: 2})
	require.NoError(t, err)
	require.Len(t, list, 2)
	list, err = b.fx.List(ctx, projection.ListOptions{Projection: "other"})
	require.NoError(t, err)
	require.Empty(t, list)
	_, err = b.fx.List(ctx, projection.ListOptions{State: "bogus"})
	require.Error(t, err)

	// A dry run reports what the action would do and changes nothing.
	e, err := b.fx.DryRunCancel(ctx, kA, "customer asked")
	require.NoError(t, err)
	require.Equal(t, effects.Cancelled, e.State)
	require.Equal(t, "cancelled: customer asked", e.LastError)
	e, err = b.fx.DryRunRetry(ctx, kA)
	require.NoError(t, err)
	require.Equal(t, effects.Pending, e.State)
	e, err = b.fx.Get(ctx, kA)
	require.NoError(t, err)
	require.Equal(t, effects.Pending, e.State, "the dry runs changed nothing")
	require.Empty(t, e.LastError)
	_, err = b.fx.DryRunRetry(ctx, "nope")
	require.ErrorIs(t, err, effects.ErrNotFound)

	// Cancelled before any attempt: never called, its job completes.
	e, err = b.fx.Cancel(ctx, kA, "customer asked")
	require.NoError(t, err)
	require.Equal(t, effects.Cancelled, e.State)
	require.Equal(t, "cancelled: customer asked", e.LastError)
	jobs, unsubscribe := effects.SubscribeJobs(b.fx)
	defer unsubscribe()
	b.start(t)
	waitJob(t, jobs, kA, river.EventKindJobCompleted)
	require.Empty(t, b.idem.callsOf(kA))
	b.waitState(t, kB, effects.Done)
	b.waitState(t, kC, effects.Done)

	// Done is final.
	_, err = b.fx.Cancel(ctx, kB, "")
	var se *effects.StateError
	require.ErrorAs(t, err, &se)
	require.Equal(t, effects.Done, se.State)
	_, err = b.fx.Retry(ctx, kB)
	require.ErrorAs(t, err, &se)
	require.Equal(t, "retry", se.Action)
	_, err = b.fx.DryRunRetry(ctx, kB)
	require.ErrorAs(t, err, &se, "a dry run is refused as the action would be")
	_, err = b.fx.DryRunCancel(ctx, kB, "")
	require.ErrorAs(t, err, &se)
	require.Equal(t, effects.Done, se.State)

	// A cancelled intent can be retried: then it runs once.
	e, err = b.fx.Retry(ctx, kA)
	require.NoError(t, err)
	require.Equal(t, effects.Pending, e.State)
	b.waitState(t, kA, effects.Done)
	require.Len(t, b.idem.callsOf(kA), 1)
	require.Len(t, b.idem.callsOf(kB), 1)

	stats, err = b.fx.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, []effects.KindStats{{Kind: kindNotify}, {Kind: kindChecked}}, stats)
}

// waitJob waits for River's event of kind about the job of key.
func waitJob(t *testing.T, events <-chan *river.Event, key string, kind river.EventKind) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case ev := <-events:
			var args struct{ Key string }
			require.NoError(t, json.Unmarshal(ev.Job.EncodedArgs, &args))
			if args.Key == key && ev.Kind == kind {
				return
			}
		case <-deadline:
			require.FailNow(t, "timed out waiting for River's "+string(kind)+" of "+key)
		}
	}
}

func effectKeys(es []effects.Effect) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Key
	}
	return out
}

// TestRebuildDoesNotResend: a rebuild replays every event through the
// handler, which records its intents again — with the same keys, so nothing
// is recorded, enqueued or sent. A projection that wants to send again on
// purpose salts its keys: then each fact is sent once more, once.
func TestRebuildDoesNotResend(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := t.Context()
	es := slices.Concat(events(t, "a", 12), events(t, "b", 9)) // batches larger than DirectJobs: relayed
	b.process(t, es...)
	b.start(t)
	b.waitAllDone(t)
	require.Len(t, b.idem.callsByKey(), len(es))
	jobs := b.count(t, `SELECT count(*) FROM river_job`)

	replay := func(ctx context.Context, emit func(context.Context, []aggregate.Event) error) error {
		for chunk := range slices.Chunk(es, effects.DirectJobs+2) {
			if err := emit(ctx, chunk); err != nil {
				return err
			}
		}
		return nil
	}
	_, err := b.proc.Build(ctx, "notifier", &projection.BuildOptions{InPlace: true, Replay: replay})
	require.NoError(t, err)
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM fx_model`), "the read model was rebuilt")
	require.Equal(t, len(es), b.count(t, `SELECT count(*) FROM effects`), "no intent recorded again")
	require.Equal(t, jobs, b.count(t, `SELECT count(*) FROM river_job`), "no job enqueued")
	require.Zero(t, b.count(t, `SELECT count(*) FROM effects WHERE state <> 'done'`))

	// The opt-in: a salt gives every fact a new key.
	b.notifier.salt = "resend-1"
	_, err = b.proc.Build(ctx, "notifier", &projection.BuildOptions{InPlace: true, Replay: replay})
	require.NoError(t, err)
	require.Equal(t, 2*len(es), b.count(t, `SELECT count(*) FROM effects`))
	b.waitAllDone(t)
	calls := b.idem.callsByKey()
	require.Len(t, calls, 2*len(es))
	for _, e := range es {
		salted := effects.Intent{Kind: kindNotify, Event: e, Salt: "resend-1"}.Key("notifier")
		require.Equal(t, 1, calls[salted])
		require.Equal(t, 1, calls[keyOf(kindNotify, e)])
	}
	// And a second rebuild with the same salt sends nothing more.
	_, err = b.proc.Build(ctx, "notifier", &projection.BuildOptions{InPlace: true, Replay: replay})
	require.NoError(t, err)
	require.Equal(t, 2*len(es), b.count(t, `SELECT count(*) FROM effects`))

	res := b.process(t, es[0])
	require.Equal(t, projection.Duplicate, res[0].Outcome)
}

// TestBuildDoesNotResend: a side-by-side rebuild (Processor.Build) replays
// every event into a new generation through the handler, which records its
// intents again — under the projection's name, not the generation's, so
// with the same keys: nothing is recorded, enqueued or sent, and the new
// generation goes live.
func TestBuildDoesNotResend(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := t.Context()
	t.Cleanup(func() { b.db.DropGenerationSchemas(t) })
	es := slices.Concat(events(t, "a", 12), events(t, "b", 9))
	b.process(t, es...)
	b.start(t)
	b.waitAllDone(t)
	require.Len(t, b.idem.callsByKey(), len(es))
	jobs := b.count(t, `SELECT count(*) FROM river_job`)

	res, err := b.proc.Build(ctx, "notifier", &projection.BuildOptions{Stream: &streamtest.Slice{Events: es, Chunk: effects.DirectJobs + 2},
		BatchSize: effects.DirectJobs + 2})
	require.NoError(t, err)
	require.Equal(t, 2, res.Generation, "the new generation is live")
	require.EqualValues(t, len(es), res.Events)
	gens, err := b.proc.Generations(ctx, "notifier")
	require.NoError(t, err)
	require.Len(t, gens, 2)
	require.Equal(t, projection.StateLive, gens[1].State)
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM `+pgx.Identifier{gens[1].Schema, "fx_model"}.Sanitize()),
		"the replay ran the handler into the new generation's read model")
	require.Equal(t, len(es), b.count(t, `SELECT count(*) FROM effects`), "no intent recorded again")
	require.Equal(t, jobs, b.count(t, `SELECT count(*) FROM river_job`), "no job enqueued")
	require.Zero(t, b.count(t, `SELECT count(*) FROM effects WHERE state <> 'done'`))
	calls := b.idem.callsByKey()
	require.Len(t, calls, len(es))
	for _, e := range es {
		require.Equal(t, 1, calls[keyOf(kindNotify, e)], "one remote call for %s v%d", e.Aggregate, e.Version)
	}
}
