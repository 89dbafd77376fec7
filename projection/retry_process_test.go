package projection_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/projection/projectiontest"
)

// The scenario of TestRetryQuarantinedProcesses: retryPayments payments of
// retryVersions versions; the handler fails on version retryPoisonVersion of
// retryPoison, so that version is quarantined and the later ones park behind
// it.
const (
	retryPoison                  = "pay-000005"
	retryPoisonVersion           = 2
	retryPayments, retryVersions = 40, 6
	retryParked                  = retryVersions - retryPoisonVersion
)

// A "retry" helper's report of one call: retryOK, retryNotQuarantined or
// the text of any other error.
const retryOK, retryNotQuarantined = "ok", "not-quarantined"

// retryEvents returns the stream of a seed, split as
// TestRetryQuarantinedConcurrently splits it: initial holds every version of
// the poisoned payment and the others' versions up to retryPoisonVersion,
// rest the others' later versions.
func retryEvents(seed uint64) (events, initial, rest []aggregate.Event) {
	events = ledger.Generate(rand.New(rand.NewPCG(seed, 0x5e)), retryPayments, retryVersions)
	for _, e := range events {
		if e.Aggregate == retryPoison || e.Version <= retryPoisonVersion {
			initial = append(initial, e)
		} else {
			rest = append(rest, e)
		}
	}
	return events, initial, rest
}

// retryFixedLedger is the parent's faulty ledger with its fault fixed: the
// projection the "retry" helpers run.
func retryFixedLedger() projection.Projection {
	fault := newOpFault(retryPoison, retryPoisonVersion)
	fault.on.Store(false)
	return opFaultyBatch{ledger.New(nil), fault}
}

// retryReport is a "retry" helper's report: the outcome of each of its
// RetryQuarantined calls and the parked events its processor drained.
type retryReport struct {
	Calls   []string
	Drained int64
}

// TestRetryQuarantinedProcesses is TestRetryQuarantinedConcurrently across
// processes: the parent quarantines an event (parking the payment's later
// versions behind it), then several processes, each with several
// goroutines, retry it at the same moment — with the fault fixed in them —
// while the parent delivers other events. It proves the contract of
// RetryQuarantined under the version row lock: exactly one call, across all
// processes and goroutines, succeeds and drains the parked successors; every
// other call gets ErrNotQuarantined and changes nothing; the event and its
// successors have exactly one effect (the read model is the fold of the
// stream) and nothing is left quarantined or parked.
func TestRetryQuarantinedProcesses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const seed = 14
	events, initial, rest := retryEvents(seed)
	b := opLedger(t, opConfig(), "batch", newOpFault(retryPoison, retryPoisonVersion))

	initial = opShuffle(seed, initial)
	res, err := b.proc.Process(ctx, projection.Batch{Events: initial})
	require.NoError(t, err)
	for i, e := range initial {
		want := projection.Applied
		if e.Aggregate == retryPoison && e.Version == retryPoisonVersion {
			want = projection.Quarantined
		} else if e.Aggregate == retryPoison && e.Version > retryPoisonVersion {
			want = projection.Parked
		}
		require.Equal(t, want, res[i].Outcome, "%s v%d", e.Aggregate, e.Version)
	}
	st := opStatus(t, b.proc, "ledger")
	require.EqualValues(t, 1, st.Quarantined)
	require.EqualValues(t, retryParked, st.Parked)
	require.EqualValues(t, 1, st.ParkedAggregates)
	b.requireFold(t, opWithout(initial, retryPoison, retryPoisonVersion))

	helpers := make([]*helperProc, retryProcs)
	for w := range helpers {
		helpers[w] = startHelper(t, "retry", b.db, seed, w)
	}
	for _, h := range helpers {
		h.expect(t, "READY")
	}
	for _, h := range helpers {
		h.send(t, "GO")
	}
	// The other payments' later versions, delivered meanwhile.
	for batch := range slices.Chunk(rest, 10) {
		res, err := b.proc.Process(ctx, projection.Batch{Events: batch})
		require.NoError(t, err)
		for i, r := range res {
			require.Equal(t, projection.Applied, r.Outcome, "%s v%d", batch[i].Aggregate, batch[i].Version)
		}
	}

	succeeded, notQuarantined := 0, 0
	var drained int64
	for _, h := range helpers {
		var r retryReport
		require.NoError(t, json.Unmarshal([]byte(h.expect(t, "RESULT")), &r))
		h.requireExit(t)
		require.Len(t, r.Calls, retryGoroutines, h.name)
		ok := 0
		for _, c := range r.Calls {
			switch c {
			case retryOK:
				ok++
			case retryNotQuarantined:
				notQuarantined++
			default:
				require.Failf(t, "unexpected RetryQuarantined error", "%s: %s", h.name, c)
			}
		}
		// Only the process whose retry succeeded drained the successors.
		require.EqualValues(t, ok*retryParked, r.Drained, "%s: %d successful retries", h.name, ok)
		succeeded += ok
		drained += r.Drained
	}
	require.Equal(t, 1, succeeded, "exactly one retry succeeds across processes and goroutines")
	require.Equal(t, retryProcs*retryGoroutines-1, notQuarantined, "every other retry finds nothing quarantined")
	require.EqualValues(t, retryParked, drained, "the parked successors drained once")
	require.Zero(t, b.proc.Counts()["ledger"].Drained, "the parent drained nothing")
	require.Equal(t, []opLog{{Action: "retry", Projection: "ledger", Aggregate: retryPoison,
		From: opPtr(retryPoisonVersion - 1), To: opPtr(retryPoisonVersion)}}, opLogRows(t, b.db, "retry"))

	b.requireFold(t, events)
	applied, err := b.proc.AppliedLog(ctx, projection.ListOptions{Projection: "ledger", Aggregate: retryPoison})
	require.NoError(t, err)
	require.Len(t, applied, retryVersions)
	v, err := b.proc.Version(ctx, "ledger", retryPoison)
	require.NoError(t, err)
	require.EqualValues(t, retryVersions, v)
	q, err := b.proc.Quarantined(ctx, projection.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, q)
	require.Equal(t, projection.ProjectionStatus{Name: "ledger", Aggregates: retryPayments, Events: int64(len(events))},
		opStatus(t, b.proc, "ledger"))
	projectiontest.RequireSettled(t, b.proc, events)
}

// retry retries the poisoned payment's quarantined event from several
// goroutines at once, once the parent says GO, and reports each call's
// outcome.
func (h *helper) retry(ctx context.Context) error {
	h.say("READY", "")
	if err := h.await("GO"); err != nil {
		return err
	}
	r := retryReport{Calls: make([]string, retryGoroutines)}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range retryGoroutines {
		wg.Go(func() {
			<-start
			switch err := acted(h.proc.RetryQuarantined(ctx, "ledger", retryPoison, nil)); {
			case err == nil:
				r.Calls[i] = retryOK
			case errors.Is(err, projection.ErrNotQuarantined):
				r.Calls[i] = retryNotQuarantined
			default:
				r.Calls[i] = "error: " + err.Error()
			}
		})
	}
	close(start)
	wg.Wait()
	r.Drained = h.proc.Counts()["ledger"].Drained
	h.say("RESULT", r)
	return nil
}
