package projection_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

func TestPayloadJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		in   projection.Payload
		want string
	}{
		{"Object", projection.Payload(`{"a": 1,
  "b": "x y"}`), `{"a":1,"b":"x y"}`},
		{"String", projection.Payload(`"text"`), `"text"`},
		{"NotJSON", projection.Payload("{not json"), `{"base64":"e25vdCBqc29u"}`},
		{"Binary", projection.Payload{0, 0xff}, `{"base64":"AP8="}`},
		{"Nil", nil, `null`},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(c.in)
			require.NoError(t, err)
			require.JSONEq(t, c.want, string(b))
			var back projection.Payload
			require.NoError(t, json.Unmarshal(b, &back))
			if json.Valid(c.in) {
				require.JSONEq(t, string(c.in), string(back))
			} else {
				require.Equal(t, c.in, back)
			}
		})
	}
}

func TestPositionJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   projection.Position
		want string
	}{
		{projection.Position("C:1/P:1"), `"C:1/P:1"`},
		{projection.Position{0, 1, 0xab}, `"0x0001ab"`},
	} {
		b, err := json.Marshal(c.in)
		require.NoError(t, err)
		require.Equal(t, c.want, string(b))
		var back projection.Position
		require.NoError(t, json.Unmarshal(b, &back))
		require.Equal(t, c.in, back)
	}
}

// TestCheckpoints stores positions in batches and on their own: a
// checkpoint never moves back, and it commits with its batch or not at all.
func TestCheckpoints(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	proc := opProcessor(t, db, nil, ledger.New(nil))

	_, ok, err := proc.LoadCheckpoint(ctx, "src")
	require.NoError(t, err)
	require.False(t, ok)
	require.Error(t, proc.SaveCheckpoint(ctx, "", projection.Position("x")))

	e, err := aggregate.New("pay-1", 1, ledger.Authorized, ledger.Data{Payer: "a", Payee: "b", Amount: 1})
	require.NoError(t, err)
	_, err = proc.Process(ctx, projection.Batch{Events: []aggregate.Event{e},
		Checkpoint: &projection.Checkpoint{Name: "src", Position: projection.Position("0005")}})
	require.NoError(t, err)
	require.NoError(t, proc.SaveCheckpoint(ctx, "src", projection.Position("0003")))
	got, ok, err := proc.LoadCheckpoint(ctx, "src")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, projection.Position("0005"), got, "a checkpoint never moves back")

	// A batch whose transaction fails leaves the checkpoint alone.
	bad, err := aggregate.New("pay-2", 1, ledger.Captured, ledger.Data{Amount: 1}) // the handler refuses it
	require.NoError(t, err)
	_, err = proc.Process(ctx, projection.Batch{Events: []aggregate.Event{bad},
		Checkpoint:   &projection.Checkpoint{Name: "src", Position: projection.Position("0009")},
		BeforeCommit: func(ctx context.Context, tx pgx.Tx) error { return errors.New("refused") }})
	require.ErrorContains(t, err, "refused")
	got, _, err = proc.LoadCheckpoint(ctx, "src")
	require.NoError(t, err)
	require.Equal(t, projection.Position("0005"), got)

	require.NoError(t, proc.SaveCheckpoint(ctx, "src", projection.Position("0007")))
	cps, err := proc.Checkpoints(ctx)
	require.NoError(t, err)
	require.Len(t, cps, 1)
	require.Equal(t, projection.Position("0007"), cps[0].Position)
	require.GreaterOrEqual(t, cps[0].AgeSeconds, 0.0)
}

// TestOperatorLog records actions, once-only findings from racing callers,
// and conflict acknowledgements, and reads them back.
func TestOperatorLog(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	proc := opProcessor(t, db, nil, ledger.New(nil))

	from, to := int64(2), int64(3)
	var wg sync.WaitGroup
	var written atomic.Int64
	for range 8 {
		wg.Go(func() {
			ok, err := proc.LogAction(ctx, projection.Action{Action: "gap-missing-at-source", Projection: "ledger",
				Aggregate: "pay-1", From: &from, To: &to, Reason: "not in the stream", Once: true})
			require.NoError(t, err)
			if ok {
				written.Add(1)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 1, written.Load(), "a once-only finding is recorded once")
	_, err := proc.LogAction(ctx, projection.Action{})
	require.Error(t, err)

	// A conflict, acknowledged.
	e, err := aggregate.New("pay-1", 1, ledger.Authorized, ledger.Data{Payer: "a", Payee: "b", Amount: 1})
	require.NoError(t, err)
	other := e
	other.Data = []byte(`{"payer":"m","payee":"b","amount":9}`)
	_, err = proc.Process(ctx, projection.Batch{Events: []aggregate.Event{e}})
	require.NoError(t, err)
	res, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{other}})
	require.NoError(t, err)
	require.Equal(t, projection.Conflict, res[0].Outcome)
	cs, err := proc.Conflicts(ctx, projection.ListOptions{Open: true})
	require.NoError(t, err)
	require.Len(t, cs, 1)
	require.NoError(t, acted(proc.AckConflict(ctx, cs[0].ID, &projection.ActionOptions{Reason: "producer bug, fixed"})))
	require.NoError(t, acted(proc.AckConflict(ctx, cs[0].ID, &projection.ActionOptions{Reason: "again"})), "acknowledging twice changes nothing")
	require.ErrorIs(t, acted(proc.AckConflict(ctx, cs[0].ID+100, &projection.ActionOptions{Reason: ""})), projection.ErrNotFound)
	open, err := proc.Conflicts(ctx, projection.ListOptions{Open: true})
	require.NoError(t, err)
	require.Empty(t, open)
	all, err := proc.Conflicts(ctx, projection.ListOptions{})
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.False(t, all[0].AcknowledgedAt.IsZero())
	require.Equal(t, "producer bug, fixed", all[0].AckReason)
	st := opStatus(t, proc, "ledger")
	require.Zero(t, st.Conflicts)
	require.EqualValues(t, 1, st.ConflictsAcknowledged)

	log, err := proc.OperatorLog(ctx, projection.ListOptions{})
	require.NoError(t, err)
	require.Len(t, log, 2)
	require.Equal(t, "gap-missing-at-source", log[0].Action)
	require.Equal(t, &from, log[0].From)
	require.Equal(t, "ack-conflict", log[1].Action)
	require.Equal(t, "producer bug, fixed", log[1].Reason)
	only, err := proc.OperatorLog(ctx, projection.ListOptions{Action: "ack-conflict"})
	require.NoError(t, err)
	require.Len(t, only, 1)
	page, err := proc.OperatorLog(ctx, projection.ListOptions{AfterID: log[0].ID})
	require.NoError(t, err)
	require.Equal(t, log[1:], page)
}
