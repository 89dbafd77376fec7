package metricstest

import (
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
)

// Processor returns a processor of ledger projections with the given
// names, on no pool: it must not process.
func Processor(tb testing.TB, names ...string) *projection.Processor {
	tb.Helper()
	projs := make([]projection.Projection, len(names))
	for i, n := range names {
		projs[i] = ledger.New(&ledger.Options{Name: n})
	}
	p, err := projection.New(nil, nil, projs...)
	require.NoError(tb, err)
	return p
}

// At is the time a test's figures carry where they carry one: fixed, so
// that the output is.
var At = time.Unix(1700000000, 500_000_000)

// Count sets counters to 10, 11, 12… in their order: no two alike, so that
// a series reading the wrong one shows.
func Count(counters ...interface{ Store(int64) }) {
	for i, c := range counters {
		c.Store(int64(10 + i))
	}
}

// RequireGolden fails tb unless c collects exactly the metrics of the text
// exposition in the file at path: the same names, help texts, types, labels
// and values, and no others.
func RequireGolden(tb testing.TB, c prometheus.Collector, path string) {
	tb.Helper()
	golden, err := os.Open(path)
	require.NoError(tb, err)
	defer golden.Close()
	require.NoError(tb, testutil.CollectAndCompare(c, golden))
}
