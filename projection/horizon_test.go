package projection_test

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/metrics"
	"github.com/inorder/inorder/projection"
)

// TestConflictHorizon: an aggregate at version 100, and version 1
// redelivered with another payload. A projection with version rows keeps
// every applied version's log entry (pages moved to the applied table), so
// the redelivery is a conflict at any age, for an EventHandler and a
// BatchHandler alike. An inline projection's row keeps the last
// InlineTable.LogEntries versions: with the default (16), version 1 is
// beyond the horizon and counts as a duplicate — counted in
// Counts.BeyondHorizon and inorder_beyond_horizon_total — while version 90
// changed is a conflict; with a horizon of 128 entries, version 1 is a
// conflict too.
func TestConflictHorizon(t *testing.T) {
	t.Parallel()
	const (
		D = projection.Duplicate
		C = projection.Conflict
	)
	for _, tc := range []struct {
		name string
		p    projection.Projection
		// beyond: version 1 is beyond the projection's horizon.
		beyond bool
	}{
		{"batch/version-rows", ledger.New(&ledger.Options{VersionRows: true}), false},
		{"event/version-rows", ledger.NewSimple(&ledger.Options{VersionRows: true}), false},
		{"batch/inline", ledger.New(nil), true},
		{"event/inline", ledger.NewSimple(nil), true},
		{"batch/inline-128", ledger.New(&ledger.Options{LogEntries: 128}), false},
		{"event/inline-128", ledger.NewSimple(&ledger.Options{LogEntries: 128}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := pgtest.NewMigrated(t)
			proc := opProcessor(t, db, nil, tc.p)
			events := ledger.Generate(rand.New(rand.NewPCG(27, 3)), 1, 100)
			for chunk := range slices.Chunk(events, 7) {
				_, err := proc.Process(ctx, projection.Batch{Events: chunk})
				require.NoError(t, err)
			}
			v, err := proc.Version(ctx, "ledger", events[0].Aggregate)
			require.NoError(t, err)
			require.EqualValues(t, 100, v)

			changed := func(e aggregate.Event) aggregate.Event {
				e.Data = []byte(`{"amount": 1}`)
				return e
			}
			res, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{events[0], changed(events[0]), events[89], changed(events[89])}})
			require.NoError(t, err)
			first := C
			if tc.beyond {
				first = D
			}
			require.Equal(t, []projection.Outcome{D, first, D, C}, outcomes(res), "v1, v1 changed, v90, v90 changed")

			beyond := proc.Counts()["ledger"].BeyondHorizon
			conflicts, err := proc.Conflicts(ctx, projection.ListOptions{Projection: "ledger"})
			require.NoError(t, err)
			var versions []int64
			for _, c := range conflicts {
				versions = append(versions, c.Version)
			}
			if tc.beyond {
				// Both deliveries of version 1 went unchecked.
				require.EqualValues(t, 2, beyond)
				require.Equal(t, []int64{90}, versions)
			} else {
				require.Zero(t, beyond)
				require.ElementsMatch(t, []int64{1, 90}, versions)
			}
			// The count is on /metrics.
			srv := httptest.NewServer(metrics.New(proc, nil).Handler())
			t.Cleanup(srv.Close)
			resp, err := srv.Client().Get(srv.URL)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			line := `inorder_beyond_horizon_total{projection="ledger"} ` + map[bool]string{true: "2", false: "0"}[tc.beyond]
			require.True(t, slices.Contains(strings.Split(string(body), "\n"), line), "/metrics has %q", line)

			// Nothing changed was applied: the read model is the stream's
			// fold.
			want, err := ledger.Fold(events)
			require.NoError(t, err)
			got, err := tc.p.(interface {
				Load(context.Context, interface {
					Query(context.Context, string, ...any) (pgx.Rows, error)
				}) (*ledger.Model, error)
			}).Load(ctx, db.Pool)
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
}
