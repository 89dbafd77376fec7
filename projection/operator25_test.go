package projection_test

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// This file holds the regression tests of issue 25's operator workflows at
// the library's level (the binary's are in cmd/inorder): one row per bad
// event, a replay that judges what was delivered, resolutions that clear
// the pending count, dry runs that change nothing, unknown types rejected.

// TestRejectedOneRowPerEvent: a delivery the source refused (a binary
// content type), the same event read again by a repair (another source
// name), and its replay are one rejected row; the replay is refused for the
// same reason; declaring its version missing resolves it.
func TestRejectedOneRowPerEvent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	proc := opProcessor(t, db, nil, ledger.New(nil))

	auth := event(t, "z1", 1, ledger.Authorized, ledger.Data{Payer: "a", Payee: "b", Amount: 5})
	bin := aggregate.Event{ID: "5f0b6a36-9e3c-4a3e-8d5b-3c0a1f2e4d6b", Aggregate: "z1", Version: 2, Type: ledger.Captured,
		Data: []byte{0xde, 0xad, 0xbe, 0xef}, ContentType: "application/octet-stream"}
	v3 := event(t, "z1", 3, ledger.Refunded, ledger.Data{Amount: 1})
	refused := bin.Validate(nil)
	require.ErrorIs(t, refused, aggregate.ErrInvalidJSON)
	require.Contains(t, refused.Error(), "content type application/octet-stream is not JSON")

	// The worker's delivery (refused by its source), a repair's read of the
	// same event, and the event as a plain delivery: one row.
	_, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{auth, v3}, Rejects: []projection.Reject{{Event: bin, Err: refused}}, Source: "esdb"})
	require.NoError(t, err)
	_, err = proc.Process(ctx, projection.Batch{Rejects: []projection.Reject{{Event: bin, Err: refused}}, Source: "repair"})
	require.NoError(t, err)
	res, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{bin}, Source: "other"})
	require.NoError(t, err)
	require.Equal(t, projection.Rejected, res[0].Outcome)
	rs, err := proc.Rejected(ctx, projection.ListOptions{})
	require.NoError(t, err)
	require.Len(t, rs, 1, "one row per bad event")
	require.EqualValues(t, 3, rs[0].Count)
	require.Equal(t, "application/octet-stream", rs[0].ContentType)
	require.Equal(t, "invalid_json", rs[0].Reason)
	require.Contains(t, rs[0].Error, "content type application/octet-stream is not JSON")

	// A replay judges what was delivered, content type included: the same
	// verdict, the same row, no delivery counted.
	rep, err := proc.ReplayRejected(ctx, rs[0].ID, &projection.ActionOptions{By: "alice"})
	require.ErrorIs(t, err, aggregate.ErrInvalidJSON)
	require.Contains(t, err.Error(), "content type application/octet-stream is not JSON")
	require.Contains(t, rep.Message, "still invalid")
	rs, err = proc.Rejected(ctx, projection.ListOptions{})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.EqualValues(t, 3, rs[0].Count)
	require.Contains(t, rs[0].Error, "content type application/octet-stream is not JSON")
	st, err := proc.Status(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, projection.RejectedCounts{Total: 1, Pending: 1}, st.Rejected)

	// Version 2 will never apply: declared missing, the rejected delivery
	// is resolved with it (a dry run first, which resolves nothing).
	dry, err := proc.DeclareGap(ctx, "ledger", "z1", 2, &projection.ActionOptions{DryRun: true, Reason: "binary event", By: "alice"})
	require.NoError(t, err)
	require.Equal(t, []int64{rs[0].ID}, dry.Resolved)
	require.Equal(t, int64(3), dry.After, "version 3 would apply behind the gap")
	st, err = proc.Status(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Rejected.Pending, "a dry run resolves nothing")
	require.Equal(t, int64(1), st.Projections[0].Parked)
	gap, err := proc.DeclareGap(ctx, "ledger", "z1", 2, &projection.ActionOptions{Reason: "binary event", By: "alice"})
	require.NoError(t, err)
	require.Equal(t, []int64{rs[0].ID}, gap.Resolved)
	st, err = proc.Status(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, projection.RejectedCounts{Total: 1, Pending: 0}, st.Rejected)
	rs, err = proc.Rejected(ctx, projection.ListOptions{})
	require.NoError(t, err)
	require.Equal(t, "declared-gap", rs[0].Resolution)
	require.Equal(t, "alice", rs[0].ResolvedBy)
	pending, err := proc.Rejected(ctx, projection.ListOptions{Open: true})
	require.NoError(t, err)
	require.Empty(t, pending)

	// Delivered again later, it stays one resolved row.
	_, err = proc.Process(ctx, projection.Batch{Rejects: []projection.Reject{{Event: bin, Err: refused}}, Source: "esdb"})
	require.NoError(t, err)
	st, err = proc.Status(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, projection.RejectedCounts{Total: 1, Pending: 0}, st.Rejected)
}

// TestDismissRejected: a rejected delivery is dismissed, with a dry run
// first; dismissing it again changes nothing; an unknown id is not found.
func TestDismissRejected(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	proc := opProcessor(t, db, nil, ledger.New(nil))
	bad := aggregate.Event{Aggregate: "pay-x", Version: 1, Type: ledger.Authorized, Data: []byte(`{`)}
	_, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{bad}, Source: "test"})
	require.NoError(t, err)
	rs, err := proc.Rejected(ctx, projection.ListOptions{})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	id := rs[0].ID

	dry, err := proc.DismissRejected(ctx, id, &projection.ActionOptions{DryRun: true, Reason: "test data", By: "bob"})
	require.NoError(t, err)
	require.True(t, dry.DryRun)
	require.True(t, dry.Changed)
	st, err := proc.Status(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Rejected.Pending, "a dry run dismisses nothing")
	require.Empty(t, opLogRows(t, db, "dismiss-rejected"))

	rep, err := proc.DismissRejected(ctx, id, &projection.ActionOptions{Reason: "test data", By: "bob"})
	require.NoError(t, err)
	require.True(t, rep.Changed)
	st, err = proc.Status(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, projection.RejectedCounts{Total: 1, Pending: 0}, st.Rejected)
	again, err := proc.DismissRejected(ctx, id, &projection.ActionOptions{Reason: "again"})
	require.NoError(t, err)
	require.False(t, again.Changed, "dismissed already")
	log, err := proc.OperatorLog(ctx, projection.ListOptions{Action: "dismiss-rejected"})
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.Equal(t, "bob", log[0].By)
	require.Equal(t, "test data", log[0].Reason)
	_, err = proc.DismissRejected(ctx, id+1000, nil)
	require.ErrorIs(t, err, projection.ErrNotFound)
}

// TestDryRunChangesNothing: a dry run of a retry runs the handler in a
// transaction it rolls back — the report says what would apply, the read
// model, the quarantine, the operator log and the counts stay as they were
// — and so does a dry run of a skip.
func TestDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	fault := newOpFault("pay-000001", 2)
	b := opLedger(t, opConfig(), "batch", fault)
	events := opShuffle(3, ledgerEvents(t, 4, 4))
	_, err := b.proc.Process(ctx, projection.Batch{Events: events})
	require.NoError(t, err)
	before := opStatus(t, b.proc, "ledger")
	require.Equal(t, int64(1), before.Quarantined)
	fault.on.Store(false) // fixed

	dry, err := b.proc.RetryQuarantined(ctx, "ledger", "pay-000001", &projection.ActionOptions{DryRun: true})
	require.NoError(t, err)
	require.Equal(t, projection.ActionReport{Action: "retry", Projection: "ledger", Generation: 1, Aggregate: "pay-000001",
		Before: 1, After: 4, Drained: 2, Changed: true, DryRun: true, Message: dry.Message}, dry)
	require.Equal(t, before, opStatus(t, b.proc, "ledger"), "nothing changed")
	require.Empty(t, opLogRows(t, b.db, "retry"))
	skip, err := b.proc.SkipQuarantined(ctx, "ledger", "pay-000001", &projection.ActionOptions{DryRun: true, Reason: "x"})
	require.NoError(t, err)
	require.Equal(t, int64(4), skip.After)
	require.Equal(t, before, opStatus(t, b.proc, "ledger"), "nothing changed")

	rep, err := b.proc.RetryQuarantined(ctx, "ledger", "pay-000001", &projection.ActionOptions{By: "carol"})
	require.NoError(t, err)
	dry.DryRun, dry.By = false, "carol"
	require.Equal(t, dry, rep, "the dry run said what the action does")
	b.requireFold(t, events)
}

// TestUnknownTypeRejected: a type no projection declares (projection.Description.Types)
// is rejected before any handler sees it — not retried, not quarantined —
// and replays once a projection accepts it.
func TestUnknownTypeRejected(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	var calls int
	counting := &opCountingLedger{Projection: ledger.New(nil), calls: &calls}
	proc := opProcessor(t, db, nil, counting)
	auth := event(t, "pay-t", 1, ledger.Authorized, ledger.Data{Payer: "a", Payee: "b", Amount: 5})
	tele := aggregate.Event{Aggregate: "pay-t", Version: 2, Type: "payment.teleported", Data: []byte(`{}`)}
	res, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{auth, tele}})
	require.NoError(t, err)
	require.Equal(t, projection.Applied, res[0].Outcome)
	require.Equal(t, projection.Rejected, res[1].Outcome)
	require.ErrorIs(t, res[1].Err, aggregate.ErrUnknownType)
	require.Equal(t, 1, calls, "the handler never saw the unknown type")
	st := opStatus(t, proc, "ledger")
	require.Zero(t, st.Quarantined)
	rs, err := proc.Rejected(ctx, projection.ListOptions{})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, "unknown_type", rs[0].Reason)

	// A projection that declares no types accepts every type.
	open := opProcessor(t, db, nil, opJournal{"journal"})
	res, err = open.Process(ctx, projection.Batch{Events: []aggregate.Event{tele}})
	require.NoError(t, err)
	require.NotEqual(t, projection.Rejected, res[0].Outcome)
}

// opCountingLedger counts its handler's calls.
type opCountingLedger struct {
	*ledger.Projection
	calls *int
}

func (l *opCountingLedger) ApplyBatch(ctx context.Context, tx *projection.Tx, events []aggregate.Event) error {
	*l.calls += len(events)
	return l.Projection.ApplyBatch(ctx, tx, events)
}

// TestStatusNamesOtherProjections: a schema that holds only another
// binary's projection says so, and each generation reports the events
// applied in it.
func TestStatusNamesOtherProjections(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	other := opProcessor(t, db, nil, opJournal{"orders"})
	_, err := other.Process(ctx, projection.Batch{Events: opNotes("o-1", 1, 3)})
	require.NoError(t, err)
	proc := opProcessor(t, db, nil, ledger.New(nil))
	st, err := proc.Status(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"orders"}, st.Others)
	require.Zero(t, st.Projections[0].Events)
	require.Len(t, st.Generations, 1)
	require.NotNil(t, st.Generations[0].Applied)
	require.Zero(t, *st.Generations[0].Applied)
	_, err = proc.Process(ctx, projection.Batch{Events: ledgerEvents(t, 3, 2)})
	require.NoError(t, err)
	st, err = proc.Status(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, int64(6), *st.Generations[0].Applied, "generation 1 counts what the workers applied")
}

// TestPayloadString: tables print payloads as text.
func TestPayloadString(t *testing.T) {
	t.Parallel()
	require.Equal(t, `{"a":1}`, projection.Payload("{ \"a\" : 1 }\n").String())
	require.Equal(t, "base64:3q0=", projection.Payload{0xde, 0xad}.String())
	require.Equal(t, "", projection.Payload(nil).String())
}

func event(t *testing.T, agg string, version int64, typ string, d ledger.Data) aggregate.Event {
	t.Helper()
	e, err := aggregate.New(agg, version, typ, d)
	require.NoError(t, err)
	return e
}

// ledgerEvents returns payments × versions ledger events.
func ledgerEvents(t *testing.T, payments, versions int) []aggregate.Event {
	t.Helper()
	return ledger.Generate(rand.New(rand.NewPCG(uint64(payments), uint64(versions))), payments, versions)
}
