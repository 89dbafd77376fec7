package cli_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/inorder/inorder/internal/syncbuf"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/esdb"
	"github.com/inorder/inorder/source/esdb/esdbtest"
)

// TestRunBuildsANewCodeVersion ships a projection change the way the
// runbook says: workers of the new code version start next to the old ones
// (a consumer of their own), build the new generation side by side while
// the old workers keep the live one current and events keep coming, and
// switch it in; then both generations hold the in-order fold of everything.
func TestRunBuildsANewCodeVersion(t *testing.T) {
	t.Parallel()
	db := pgtest.NewMigrated(t)
	t.Cleanup(func() { db.DropGenerationSchemas(t) })
	srv := esdbtest.New(t)
	var mu sync.Mutex
	var all []aggregate.Event
	appendEvents := func(seed uint64, offset int) {
		events := ledger.Generate(rand.New(rand.NewPCG(seed, seed)), 100, 5)
		for i := range events {
			events[i].Aggregate = events[i].Aggregate + "-" + string(rune('a'+offset))
			_, err := srv.Append("payment-"+events[i].Aggregate, esdbtest.Event{ID: uuid.New(), Type: events[i].Type, Data: events[i].Data})
			require.NoError(t, err)
		}
		mu.Lock()
		all = append(all, events...)
		mu.Unlock()
	}
	appendEvents(1, 0)
	env := map[string]string{"DATABASE_URL": db.URL, "INORDER_SCHEMA": db.Schema, "ESDB_URL": srv.URL(), "INORDER_STREAM_PREFIX": "payment-"}
	start := func(p projection.Projection, name string) (stop func() error, logs *syncBuffer) {
		ctx, cancel := context.WithCancel(context.Background())
		logs = &syncBuffer{}
		cfg := cli.Config{Projections: []projection.Projection{p}, Sources: []source.Driver{esdb.Driver()}, Stdout: logs, Stderr: logs, Getenv: func(k string) string { return env[k] }}
		done := make(chan error, 1)
		go func() {
			done <- cli.Run(ctx, cfg, []string{"run", "--name", name, "--http-addr", "", "--max-wait", "5ms", "--batch-size", "50"})
		}()
		return func() error {
			cancel() // Run's context: stop at once
			if err := <-done; !errors.Is(err, esdb.ErrAborted) {
				return err
			}
			return nil
		}, logs
	}
	// sum is the events a generation applied: its payments' versions.
	sum := func(key string) int64 {
		var schema string
		require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT coalesce((SELECT schema FROM generations WHERE key = $1), '')`, key).Scan(&schema))
		table := pgx.Identifier{"ledger_payments"}
		if schema != "" {
			table = pgx.Identifier{schema, "ledger_payments"}
		}
		var exists bool
		require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL`, table.Sanitize()).Scan(&exists))
		if !exists {
			return 0
		}
		var n int64
		require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT coalesce(sum(version), 0)::bigint FROM `+table.Sanitize()).Scan(&n))
		return n
	}
	waitFor := func(what string, cond func() bool) {
		deadline := time.Now().Add(2 * time.Minute)
		for !cond() {
			require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
			time.Sleep(10 * time.Millisecond)
		}
	}
	total := func() int64 {
		mu.Lock()
		defer mu.Unlock()
		return int64(len(all))
	}

	stopV1, logsV1 := start(ledger.New(nil), "v1")
	waitFor("generation 1", func() bool { return sum("ledger") == total() })
	stopV2, logsV2 := start(ledgertest.V2{Projection: ledger.New(nil)}, "v2")
	// Events keep coming while version 2 builds.
	for i := 1; i <= 4; i++ {
		appendEvents(uint64(10+i), i)
	}
	var state string
	waitFor("generation 2 live", func() bool {
		err := db.Pool.QueryRow(t.Context(), `SELECT state FROM generations WHERE projection = 'ledger' AND generation = 2`).Scan(&state)
		return err == nil && state == projection.StateLive
	})
	appendEvents(20, 5)
	waitFor("both generations", func() bool { return sum("ledger") == total() && sum("ledger@2") == total() })
	require.NoError(t, stopV2(), logsV2.String())
	require.NoError(t, stopV1(), logsV1.String())
	require.Contains(t, logsV2.String(), "rebuild done")
	require.Contains(t, logsV2.String(), "rebuilding side by side: no live generation has this code version")
	require.NotContains(t, logsV1.String(), "rebuild", "version 1 has its live generation: it builds nothing")

	want, err := ledger.Fold(all)
	require.NoError(t, err)
	var schema string
	var code int
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT schema, code_version FROM generations WHERE projection = 'ledger' AND state = 'live'`).
		Scan(&schema, &code))
	require.Equal(t, 2, code)
	for _, s := range []string{schema, ""} {
		var got *ledger.Model
		require.NoError(t, pgx.BeginFunc(t.Context(), db.Pool, func(tx pgx.Tx) error {
			if s != "" {
				if _, err := tx.Exec(t.Context(), `SET LOCAL search_path = `+pgx.Identifier{s}.Sanitize()); err != nil {
					return err
				}
			}
			got, err = ledger.New(nil).Load(t.Context(), tx)
			return err
		}))
		require.Equal(t, want, got, "generation in schema %q", s)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer = syncbuf.Buffer
