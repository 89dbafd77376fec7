package projection_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// BenchmarkConflictHorizon measures what an inline projection's conflict
// horizon (InlineTable.LogEntries: how many of its last versions a row's
// log keeps, 8 bytes each, rewritten by every upsert) costs, side by side:
// the inline ledger through Processor.Process, one worker, batches of 1000
// consecutive events of 250 payments × 200 versions (long aggregates, so
// that every row's log fills up), with horizons of 16 (the default), 64,
// 256 and 1024 entries, and the ledger with version rows (whose applied log
// keeps every version: the horizon is unbounded). Each run starts on a
// fresh schema and fails unless the read model equals ledger.Fold. With -v
// it logs each variant's events/s and its ratio to the default horizon:
//
//	go test -run '^$' -bench BenchmarkConflictHorizon -benchtime=1x -count=3 -v ./projection/
func BenchmarkConflictHorizon(b *testing.B) {
	events := ledger.Generate(rand.New(rand.NewPCG(2027, 3)), 250, 200)
	want, err := ledger.Fold(events)
	require.NoError(b, err)
	variants := []struct {
		name string
		opts ledger.Options
	}{
		{"inline-16", ledger.Options{}},
		{"inline-64", ledger.Options{LogEntries: 64}},
		{"inline-256", ledger.Options{LogEntries: 256}},
		{"inline-1024", ledger.Options{LogEntries: 1024}},
		{"version-rows", ledger.Options{VersionRows: true}},
	}
	rates := map[string][]float64{}
	// Rounds of every variant in turn, so that a change of the machine's
	// load hits them alike.
	for range 3 {
		for _, v := range variants {
			horizonRun(b, v.name, &v.opts, events, want, rates)
		}
	}
	base := median(rates["inline-16"])
	if base == 0 {
		return
	}
	var sb strings.Builder
	for _, v := range variants {
		if r := rates[v.name]; len(r) > 0 {
			fmt.Fprintf(&sb, "%-14s median %6.0f events/s  %.2f× inline-16   best %6.0f events/s  %.2f× inline-16's best  (%d runs)\n",
				v.name, median(r), median(r)/base, slices.Max(r), slices.Max(r)/slices.Max(rates["inline-16"]), len(r))
		}
	}
	b.Log("\n" + sb.String())
}

// horizonRun is one run of a BenchmarkConflictHorizon variant.
func horizonRun(b *testing.B, name string, opts *ledger.Options, events []aggregate.Event, want *ledger.Model, rates map[string][]float64) {
	b.Run(name, func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			db := pgtest.NewMigrated(b)
			l := ledger.New(opts)
			proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema}, l)
			require.NoError(b, err)
			require.NoError(b, proc.Setup(b.Context()))
			_, err = db.Pool.Exec(b.Context(), `CHECKPOINT`)
			require.NoError(b, err)
			b.StartTimer()
			start := time.Now()
			for chunk := range slices.Chunk(events, 1000) {
				if _, err := proc.Process(b.Context(), projection.Batch{Events: chunk}); err != nil {
					b.Fatal(err)
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			rate := float64(len(events)) / elapsed.Seconds()
			rates[name] = append(rates[name], rate)
			b.ReportMetric(rate, "events/s")
			got, err := l.Load(b.Context(), db.Pool)
			require.NoError(b, err)
			require.Equal(b, want, got)
			b.StartTimer()
		}
	})
}

// median returns the median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	return s[len(s)/2]
}
