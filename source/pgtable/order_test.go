package pgtable_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/pgtable"
)

// Rows are read in the order of their transaction ids as numbers, not as
// text: with ids of different lengths ("99965", "100002" — the counter of
// every cluster crosses such a boundary) a text order reads the longer
// one first, moves past the shorter and skips its rows for ever. Found by
// pgtablee2e at 1M events, whose load crossed txid 100000: 43% of the
// stream never delivered, the rest parked, at zero reported lag.
//
// The table here is an application's, whose txid column the test fills
// itself (ids far below any running transaction: all visible), across
// digit boundaries; the source must deliver all of it, and its replay for
// a rebuild must read it in the same order.
func TestReadOrderAcrossTxidLengths(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, err := b.DB.Pool.Exec(ctx, `CREATE TABLE outbox (
	id bigserial PRIMARY KEY, txid xid8 NOT NULL, event_id text, aggregate_id text, aggregate_version integer,
	event_type text, payload text, created_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX ON outbox (txid, id)`)
	require.NoError(t, err)
	events := ledger.Generate(rand.New(rand.NewPCG(3, 4)), 10, 6)
	// One transaction id per 5 rows, increasing: 8, 9, 10, 11, 98, 99,
	// 100, 101, 998, …
	var txids []uint64
	for base := uint64(10); len(txids)*5 < len(events); base *= 10 {
		txids = append(txids, base-2, base-1, base, base+1)
	}
	for i, e := range events {
		_, err := b.DB.Pool.Exec(ctx, `INSERT INTO outbox (txid, event_id, aggregate_id, aggregate_version, event_type, payload)
VALUES ($1::text::xid8, $2, $3, $4, $5, $6)`, strconv.FormatUint(txids[i/5], 10), e.StableID(), e.Aggregate, e.Version, e.Type, string(e.Data))
		require.NoError(t, err)
	}
	cfg := &pgtable.Config{Pool: b.DB.Pool, Processor: b.Proc, Table: outboxTable, Partitions: 1, Channel: "-",
		Workers: 2, BatchSize: 7, ReadBatch: 4, MaxWait: time.Millisecond, PollInterval: 20 * time.Millisecond}
	s, err := pgtable.New(cfg)
	require.NoError(t, err)
	stop := run(t, s)
	waitFor(t, "every event applied", func() bool { return b.AppliedVersions(t) == len(events) })
	stop()
	b.RequireFold(t, events)
	require.Zero(t, b.Proc.Counts()["ledger"].Deliveries[projection.Parked], "events read out of order")

	// The replay of a rebuild reads the same order.
	rcfg := *cfg
	rcfg.Processor, rcfg.Schema = nil, b.DB.Schema
	r, err := pgtable.NewReplayer(&rcfg)
	require.NoError(t, err)
	var seen []string
	require.NoError(t, r.Read(ctx, nil, func(_ context.Context, sb projection.StreamBatch) error {
		for _, e := range sb.Events {
			seen = append(seen, e.StableID())
		}
		return nil
	}))
	want := make([]string, len(events))
	for i, e := range events {
		want[i] = e.StableID()
	}
	require.Equal(t, want, seen)
}
