package projection_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/projection"
)

// TestStatusTotalsMaxAge: with TotalsMaxAge the totals come from the last
// reading (and say when it was), every other figure is live; without it
// they are read now.
func TestStatusTotalsMaxAge(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := t.Context()
	events := ledgertest.Delivered(t, b.proc, rand.New(rand.NewPCG(3, 4)), 10, 3)
	cached := &projection.StatusOptions{TotalsMaxAge: time.Hour}
	st, err := b.proc.Status(ctx, cached)
	require.NoError(t, err)
	require.Equal(t, int64(len(events)), st.Projections[0].Events, "the first reading is in line")
	require.False(t, st.TotalsAt.IsZero())
	first := st.TotalsAt

	more := ledger.Generate(rand.New(rand.NewPCG(5, 6)), 5, 3)
	for i := range more {
		more[i].Aggregate += "-more"
	}
	// One of them parks: a live figure.
	gapped := more[len(more)-1]
	gapped.Aggregate, gapped.Version = "parked-one", 2
	_, err = b.proc.Process(ctx, projection.Batch{Events: append(more, gapped)})
	require.NoError(t, err)
	st, err = b.proc.Status(ctx, cached)
	require.NoError(t, err)
	require.Equal(t, int64(len(events)), st.Projections[0].Events, "the totals are the cached reading")
	require.Equal(t, first, st.TotalsAt)
	require.Equal(t, int64(1), st.Projections[0].Parked, "the other figures are live")
	require.True(t, st.Time.After(first) || st.Time.Equal(first))

	st, err = b.proc.Status(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, int64(len(events)+len(more)), st.Projections[0].Events, "without TotalsMaxAge: read now")
	require.Equal(t, st.Time, st.TotalsAt)
}
