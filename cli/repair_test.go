package cli_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/source/esdb/esdbtest"
)

func TestParkedRepair(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := esdbtest.New(t)
	b.env["ESDB_URL"] = srv.URL()
	b.env["INORDER_STREAM_PREFIX"] = "payment-"

	appendAll := func(events ...aggregate.Event) {
		for _, e := range events {
			_, err := srv.Append("payment-"+e.Aggregate, esdbtest.Event{Type: e.Type, Data: e.Data})
			require.NoError(t, err)
		}
	}
	// pay-1: the stream has versions 1-3, the gate only got 3.
	one := []aggregate.Event{authorized(t, "pay-1"), event(t, "pay-1", 2, ledger.Approved, ledger.Data{}),
		event(t, "pay-1", 3, ledger.Captured, ledger.Data{Amount: 300})}
	appendAll(one...)
	// pay-2: the stream has version 1 only; the gate got 1 and 3.
	two := []aggregate.Event{authorized(t, "pay-2"), event(t, "pay-2", 3, ledger.Voided, ledger.Data{})}
	appendAll(two[0])
	b.process(t, one[2], two[0], two[1])

	// pay-2 misses version 2 at the source: done, but incomplete.
	out, _, err := b.run(t, "parked", "repair", "--projection", "ledger")
	require.ErrorIs(t, err, cli.ErrIncomplete)
	require.Regexp(t, `(?m)^AGGREGATE\s+LOOKED FOR\s+FOUND\s+OUTCOMES\s+MISSING AT SOURCE\s+APPLIED`, out)
	require.Regexp(t, `(?m)^pay-1\s+1-2\s+2\s+2 applied\s+-\s+ledger 0->3, toggle 0->3\s*$`, out)
	require.Regexp(t, `(?m)^pay-2\s+2-2\s+0\s+-\s+\[2\]\s+nothing\s*$`, out, "nothing applied: no version shown as if it were")

	var reps []cli.RepairReport
	repairJSON := func(args ...string) error {
		out, _, err := b.run(t, append([]string{"parked", "repair", "--json"}, args...)...)
		require.NoError(t, json.Unmarshal([]byte(out), &reps), out)
		return err
	}
	require.ErrorIs(t, repairJSON("pay-2"), cli.ErrIncomplete)
	require.Len(t, reps, 1)
	require.Equal(t, "pay-2", reps[0].Aggregate)
	require.Equal(t, []string{"2"}, reps[0].Missing)
	require.Equal(t, map[string]int64{"ledger": 1, "toggle": 1}, reps[0].Before)
	require.Equal(t, reps[0].Before, reps[0].After)

	require.NoError(t, repairJSON("pay-1"))
	require.Empty(t, reps, "pay-1 waits no more")

	// The stream of pay-3 does not exist at all.
	b.process(t, event(t, "pay-3", 2, ledger.Approved, ledger.Data{}))
	require.ErrorIs(t, repairJSON("pay-3"), cli.ErrIncomplete)
	require.Len(t, reps, 1)
	require.Equal(t, []string{"1"}, reps[0].Missing)
	require.Contains(t, reps[0].Reason, "not found")

	_, _, err = b.run(t, "parked", "repair", "a", "b")
	require.ErrorIs(t, err, cli.ErrUsage)
}
