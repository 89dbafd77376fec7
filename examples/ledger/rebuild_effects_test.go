package ledger_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/internal/streamtest"
	"github.com/inorder/inorder/projection"
)

// TestRebuildSendsNoWebhook: the ledger records a settlement webhook in the
// transaction that applies each settling capture; rebuilding it — in place
// (Processor.Build, InPlace) and side by side (Processor.Build) — replays every
// event through the same handler, which records the same intents again.
// Their keys hold no generation, so nothing is recorded, enqueued or sent:
// the receiver, which counts deliveries by idempotency key, sees every
// settlement's deliveries of the first run and no more, while a payment
// settled after the rebuilds is sent once.
func TestRebuildSendsNoWebhook(t *testing.T) {
	t.Parallel()
	eachShape(t, func(t *testing.T, perEvent bool) {
		ctx := t.Context()
		db := pgtest.NewMigrated(t)
		t.Cleanup(func() { db.DropGenerationSchemas(t) })
		w := newWebhookLedger(t, db, perEvent)
		recv, proc := w.recv, w.proc
		w.start(t)

		events := ledger.Generate(rand.New(rand.NewPCG(27, 4)), 30, 6)
		for chunk := range slices.Chunk(events, 25) {
			_, err := proc.Process(ctx, projection.Batch{Events: chunk})
			require.NoError(t, err)
		}
		want, err := ledger.Settlements(events, "ledger")
		require.NoError(t, err)
		require.NotEmpty(t, want)
		before := recv.wait(t, want)
		count := func(q string) int {
			t.Helper()
			var n int
			require.NoError(t, db.Pool.QueryRow(ctx, q).Scan(&n))
			return n
		}
		intents, jobs := count(`SELECT count(*) FROM effects`), count(`SELECT count(*) FROM river_job`)
		require.Equal(t, len(want), intents, "one intent per settlement")

		// In place: the read model is emptied and replayed.
		replay := func(ctx context.Context, emit func(context.Context, []aggregate.Event) error) error {
			for chunk := range slices.Chunk(events, 40) {
				if err := emit(ctx, chunk); err != nil {
					return err
				}
			}
			return nil
		}
		_, err = proc.Build(ctx, "ledger", &projection.BuildOptions{InPlace: true, Replay: replay})
		require.NoError(t, err)
		require.Equal(t, intents, count(`SELECT count(*) FROM effects`), "the rebuild in place recorded no intent")
		require.Equal(t, jobs, count(`SELECT count(*) FROM river_job`), "the rebuild in place enqueued no job")

		// Side by side: generation 2 is replayed from the stream, caught
		// up, verified against generation 1 and switched in.
		res, err := proc.Build(ctx, "ledger", &projection.BuildOptions{Stream: &streamtest.Slice{Events: events, Chunk: 20}, BatchSize: 50})
		require.NoError(t, err)
		require.Equal(t, 2, res.Generation)
		require.EqualValues(t, len(events), res.Events)
		var payments int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{db.Schema + "_ledger_g2", "ledger_payments"}.Sanitize()).Scan(&payments))
		require.Equal(t, 30, payments, "the replay ran the handler into generation 2")
		require.Equal(t, intents, count(`SELECT count(*) FROM effects`), "the side-by-side rebuild recorded no intent")
		require.Equal(t, jobs, count(`SELECT count(*) FROM river_job`), "the side-by-side rebuild enqueued no job")

		// A payment settled after the rebuilds is sent, once; by the time
		// its webhook arrived, nothing else was.
		more := ledger.Generate(rand.New(rand.NewPCG(27, 5)), 1, 6)
		for i := range more {
			more[i].Aggregate = "pay-900000"
		}
		extra, err := ledger.Settlements(more, "ledger")
		require.NoError(t, err)
		require.NotEmpty(t, extra, "the new payment settles")
		_, err = proc.Process(ctx, projection.Batch{Events: more})
		require.NoError(t, err)
		all := map[string]ledger.Settled{}
		for k, s := range want {
			all[k] = s
		}
		for k, s := range extra {
			all[k] = s
		}
		after := recv.wait(t, all)
		for k := range want {
			require.Equal(t, before[k], after[k], "deliveries of %s", k)
		}
		for k := range extra {
			require.Equal(t, 1+boolInt(k[0]%3 == 0), after[k], "the new settlement %s is delivered once (a 503 retried once)", k)
		}
		require.Len(t, after, len(all), "no delivery with another key")
		require.Equal(t, intents+len(extra), count(`SELECT count(*) FROM effects`))
	})
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// wait waits until the receiver applied every settlement of want, checks
// their payloads, and returns the deliveries by key.
func (r *receiver) wait(t *testing.T, want map[string]ledger.Settled) map[string]int {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		r.mu.Lock()
		n, ch := 0, r.changed
		for k := range want {
			if _, ok := r.applied[k]; ok {
				n++
			}
		}
		if n == len(want) {
			for k, s := range want {
				require.Equal(t, s, r.applied[k], "the settlement %s", k)
			}
			out := make(map[string]int, len(r.deliveries))
			for k, v := range r.deliveries {
				out[k] = v
			}
			r.mu.Unlock()
			return out
		}
		r.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			require.FailNow(t, "timed out", "%d of %d settlements notified", n, len(want))
		}
	}
}
