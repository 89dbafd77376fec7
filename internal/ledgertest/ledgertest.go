package ledgertest

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// Bundle is one test's schema, the ledger projection and a processor of it.
type Bundle struct {
	DB     *pgtest.DB
	Proc   *projection.Processor
	Ledger *ledger.Projection
}

// New returns a Bundle on a migrated schema of the test's own, its
// processor set up.
func New(tb testing.TB) *Bundle {
	tb.Helper()
	b := &Bundle{DB: pgtest.NewMigrated(tb), Ledger: ledger.New(nil)}
	b.Proc = b.NewProcessor(tb)
	require.NoError(tb, b.Proc.Setup(context.Background()))
	return b
}

// NewProcessor returns another processor of the ledger on the bundle's
// schema, like one of another process.
func (b *Bundle) NewProcessor(tb testing.TB) *projection.Processor {
	tb.Helper()
	p, err := projection.New(b.DB.Pool, &projection.Config{Schema: b.DB.Schema}, b.Ledger)
	require.NoError(tb, err)
	return p
}

// Processors returns the bundle's processor and n-1 more of the ledger on
// its schema (NewProcessor): n processes' processors.
func (b *Bundle) Processors(tb testing.TB, n int) []*projection.Processor {
	tb.Helper()
	procs := []*projection.Processor{b.Proc}
	for len(procs) < n {
		procs = append(procs, b.NewProcessor(tb))
	}
	return procs
}

// Fed returns a processor of projs (with cfg, on a migrated schema of the
// test's own), set up and fed, in one batch, a ledger stream of payments ×
// versions events generated from rng, with the stream and its in-order
// fold.
func Fed(tb testing.TB, cfg projection.Config, rng *rand.Rand, payments, versions int, projs ...projection.Projection) (*pgtest.DB, *projection.Processor, []aggregate.Event, *ledger.Model) {
	tb.Helper()
	ctx := context.Background()
	db := pgtest.NewMigrated(tb)
	cfg.Schema = db.Schema
	proc, err := projection.New(db.Pool, &cfg, projs...)
	require.NoError(tb, err)
	require.NoError(tb, proc.Setup(ctx))
	events := ledger.Generate(rng, payments, versions)
	_, err = proc.Process(ctx, projection.Batch{Events: events})
	require.NoError(tb, err)
	want, err := ledger.Fold(events)
	require.NoError(tb, err)
	return db, proc, events, want
}

// V2 is the ledger at code version 2: the same read model shipped as a
// new code version, which a side-by-side build makes a new generation of.
type V2 struct{ *ledger.Projection }

// Describe is the ledger's description with Version 2.
func (l V2) Describe() projection.Description {
	d := l.Projection.Describe()
	d.Version = 2
	return d
}

// Marks counts the batches a processor went through (Config.OnBatch) and
// those marked exclusive (projection.BatchInfo.Exclusive).
type Marks struct{ batches, exclusive atomic.Int64 }

// MarkedProcessor returns another processor of the ledger on the bundle's
// schema (NewProcessor) that counts its batches' marks in the Marks it
// returns.
func (b *Bundle) MarkedProcessor(tb testing.TB) (*projection.Processor, *Marks) {
	tb.Helper()
	m := &Marks{}
	p, err := projection.New(b.DB.Pool, &projection.Config{Schema: b.DB.Schema, OnBatch: func(info projection.BatchInfo) {
		m.batches.Add(1)
		if info.Exclusive {
			m.exclusive.Add(1)
		}
	}}, b.Ledger)
	require.NoError(tb, err)
	return p, m
}

// RequireMarked requires batches, every one of them marked exclusive, or
// none.
func (m *Marks) RequireMarked(tb testing.TB, exclusive bool) {
	tb.Helper()
	n, marked := m.batches.Load(), m.exclusive.Load()
	require.Positive(tb, n, "no batch")
	if exclusive {
		require.Equal(tb, n, marked, "batches not marked exclusive")
	} else {
		require.Zero(tb, marked, "batches marked exclusive")
	}
}
