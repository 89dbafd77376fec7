package projection_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgproxy"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/internal/streamtest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/projection/projectiontest"
)

// proxied is a processor whose connections go through a pgproxy, and what
// it reported of its batches.
type proxied struct {
	*bundle
	proxy *pgproxy.Proxy

	mu      sync.Mutex
	batches []projection.BatchInfo
}

// setupProxied returns a ledger processor on a fresh schema whose pool
// connects through a proxy that can cut its connections.
func setupProxied(t *testing.T) *proxied {
	t.Helper()
	db := pgtest.NewMigrated(t)
	proxy, u, err := pgproxy.ListenFor(db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, proxy.Close()) })
	pool, err := pgxpool.New(t.Context(), u)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	px := &proxied{proxy: proxy}
	l := ledger.New(nil)
	proc, err := projection.New(pool, &projection.Config{Schema: db.Schema, OnBatch: func(bi projection.BatchInfo) {
		px.mu.Lock()
		defer px.mu.Unlock()
		px.batches = append(px.batches, bi)
	}}, l)
	require.NoError(t, err)
	require.NoError(t, proc.Setup(t.Context()))
	px.bundle = &bundle{db: db, proc: proc, ledger: l}
	return px
}

func (px *proxied) lastBatch() projection.BatchInfo {
	px.mu.Lock()
	defer px.mu.Unlock()
	return px.batches[len(px.batches)-1]
}

// TestAmbiguousCommit cuts the connection during COMMIT, after the server
// committed and before Process heard of it: Process cannot know whether the
// batch committed, so it retries it, and the retry finds every delivery
// already done — duplicates, parked ones included. No error
// reaches the caller, and the read model has each event once.
func TestAmbiguousCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	px := setupProxied(t)
	events := ledger.Generate(rand.New(rand.NewPCG(21, 22)), 6, 4)

	// A batch that applies: versions 1-3 of every payment.
	var first, last []aggregate.Event
	for _, e := range events {
		if e.Version <= 3 {
			first = append(first, e)
		} else {
			last = append(last, e)
		}
	}
	px.proxy.CutAtCommit(1)
	res, err := px.proc.Process(ctx, projection.Batch{Events: first})
	require.NoError(t, err, "an ambiguous commit is retried, not returned")
	require.EqualValues(t, 1, px.proxy.Stats().CommitCuts, "the commit was cut")
	require.Equal(t, 2, px.lastBatch().Attempts)
	for i, r := range res {
		require.Equal(t, projection.Duplicate, r.Outcome, "%s v%d: the first attempt committed it", first[i].Aggregate, first[i].Version)
	}
	px.requireFold(t, first)

	// A batch that parks: the same holds for parked deliveries.
	px.proxy.CutAtCommit(1)
	res, err = px.proc.Process(ctx, projection.Batch{Events: last[:1]})
	require.NoError(t, err)
	require.EqualValues(t, 2, px.proxy.Stats().CommitCuts)
	require.Equal(t, 2, px.lastBatch().Attempts)
	require.Equal(t, projection.Duplicate, res[0].Outcome, "parked by the first attempt")

	// And a batch that drains it along with the rest.
	px.proxy.CutAtCommit(1)
	res, err = px.proc.Process(ctx, projection.Batch{Events: last[1:]})
	require.NoError(t, err)
	require.EqualValues(t, 3, px.proxy.Stats().CommitCuts)
	requireEvery(t, projection.Duplicate, res)
	px.requireFold(t, events)
	projectiontest.RequireSettled(t, px.proc, events)
	require.Zero(t, px.proxy.ArmedCommitCuts())
}

// TestConnectionCutMidBatch cuts the connections of batches in flight, from
// several goroutines, at every point of their transactions: each batch is
// retried on a new connection and no error reaches the caller.
func TestConnectionCutMidBatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	px := setupProxied(t)
	events := ledger.Generate(rand.New(rand.NewPCG(23, 24)), 40, 10)
	deliveries := append(append([]aggregate.Event{}, events...), events[:len(events)/3]...)
	rng := rand.New(rand.NewPCG(25, 26))
	rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	work := streamtest.Batches(rng, deliveries, 20)

	// The cutter cuts whatever is in a transaction, and every few rounds a
	// commit, while the batches run.
	done := make(chan struct{})
	var cuts int
	go func() {
		defer close(done)
		for round := 0; ctx.Err() == nil; round++ {
			if round%7 == 0 && px.proxy.ArmedCommitCuts() == 0 {
				px.proxy.CutAtCommit(1)
			}
			cuts += px.proxy.Cut(pgproxy.InTransaction, 1)
			if cuts >= 25 {
				return
			}
			select {
			case <-ctx.Done():
			case <-px.proxy.Activity():
			}
		}
	}()
	err := projectiontest.Deliver(ctx, work, 4, func(ctx context.Context, b []aggregate.Event) error {
		_, err := px.proc.Process(ctx, projection.Batch{Events: b})
		return err
	})
	cancel()
	<-done
	require.NoError(t, err)
	st := px.proxy.Stats()
	t.Logf("%d batches, %d connections cut mid-transaction, %d at commit, %d connections", len(work), st.Cuts, st.CommitCuts, st.Conns)
	require.Positive(t, st.Cuts)
	px.requireFold(t, events)
	projectiontest.RequireSettled(t, px.proc, events)
}

// eofJournal journals events, and fails on aggregate "poison" with
// io.ErrUnexpectedEOF — what a handler decoding a truncated payload returns
// — while its connection is fine.
type eofJournal struct{}

func (eofJournal) Name() string { return "eofjournal" }

func (eofJournal) Setup(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `CREATE TABLE eofjournal (aggregate text, version bigint)`)
	return err
}

func (eofJournal) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE eofjournal`)
	return err
}

func (eofJournal) Apply(ctx context.Context, tx *projection.Tx, e aggregate.Event) error {
	if e.Aggregate == "poison" {
		return fmt.Errorf("decode %s: %w", e.Type, io.ErrUnexpectedEOF)
	}
	tx.Queue(`INSERT INTO eofjournal VALUES ($1, $2)`, e.Aggregate, e.Version)
	return nil
}

// TestHandlerEOFQuarantines: a handler's own io.ErrUnexpectedEOF, on a
// connection that is fine, is a handler failure — retried MaxAttempts times,
// then quarantined — not a lost connection retried for MaxRetryTime.
func TestHandlerEOFQuarantines(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	var infos []projection.BatchInfo
	cfg := opConfig()
	cfg.OnBatch = func(bi projection.BatchInfo) { infos = append(infos, bi) }
	proc := opProcessor(t, db, cfg, eofJournal{})
	res, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{
		{Aggregate: "poison", Version: 1, Type: "note", Data: []byte(`{}`)},
		{Aggregate: "fine", Version: 1, Type: "note", Data: []byte(`{}`)},
	}})
	require.NoError(t, err)
	require.Equal(t, []projection.Outcome{projection.Quarantined, projection.Applied}, outcomes(res))
	require.Len(t, infos, 1)
	require.Equal(t, cfg.MaxAttempts, infos[0].Attempts, "retried as a handler failure")
	q, err := proc.Quarantined(ctx, projection.ListOptions{})
	require.NoError(t, err)
	require.Len(t, q, 1)
	require.Contains(t, q[0].Error, io.ErrUnexpectedEOF.Error())
}

// TestClosedPool: a closed pool is not a lost connection; Process fails at
// once instead of retrying for MaxRetryTime.
func TestClosedPool(t *testing.T) {
	t.Parallel()
	db := pgtest.NewMigrated(t)
	pool, err := pgxpool.New(t.Context(), db.URL)
	require.NoError(t, err)
	var infos []projection.BatchInfo
	proc, err := projection.New(pool, &projection.Config{Schema: db.Schema,
		OnBatch: func(bi projection.BatchInfo) { infos = append(infos, bi) }}, eofJournal{})
	require.NoError(t, err)
	pool.Close()
	_, err = proc.Process(t.Context(), projection.Batch{Events: []aggregate.Event{
		{Aggregate: "a", Version: 1, Type: "note", Data: []byte(`{}`)}}})
	require.Error(t, err)
	require.False(t, projection.IsTransient(err), "%v", err)
	require.Len(t, infos, 1)
	require.Equal(t, 1, infos[0].Attempts)
}
