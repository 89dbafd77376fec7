package projection_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// TestRowCacheBound: Config.RowCache bounds what a processor remembers of
// the inline rows its commits wrote. Two sets of ten aggregates take turns:
// with the default bound the second turn of the first set finds its rows
// remembered and reads none; with a bound of 4 the second set's batch made
// the memory start again, so the first set's rows are read back (counted),
// once each; with a negative bound nothing is remembered. Every read model
// ends the same, versions 1 to 3 applied in order.
func TestRowCacheBound(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		bound   int
		counted int64 // rows counted over the four later batches
	}{
		{"default", 0, 0},
		{"bound-4", 4, 40},
		{"none", -1, 40},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := setup(t, nil).db
			cfg := opConfig()
			cfg.RowCache = c.bound
			proc := opProcessor(t, db, cfg, orderLog{})
			batch := func(set string, v int64) []aggregate.Event {
				var evs []aggregate.Event
				for i := range 10 {
					evs = append(evs, aggregate.Event{Aggregate: fmt.Sprintf("%s%d", set, i), Version: v, Type: "t", Data: []byte(`{}`)})
				}
				return evs
			}
			for v := int64(1); v <= 3; v++ {
				for _, set := range []string{"a", "b"} {
					res, err := proc.Process(ctx, projection.Batch{Events: batch(set, v)})
					require.NoError(t, err)
					for _, o := range outcomes(res) {
						require.Equal(t, projection.Applied, o, "%s version %d", set, v)
					}
				}
			}
			require.Equal(t, c.counted, projection.RowsCounted(proc), "inline rows read back instead of remembered")
			var wrong int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM order_log WHERE applied <> '1,2,3,'`).Scan(&wrong))
			require.Zero(t, wrong, "rows not at versions 1 to 3 in order")
			var rows int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM order_log`).Scan(&rows))
			require.Equal(t, 20, rows)
		})
	}
}
