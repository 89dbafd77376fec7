package effects_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/projection"
)

// TestRemoteFailures: a timeout, 5xx answers and a permanent 4xx on an
// idempotent remote. The timed-out and 5xx effects retry with the same key,
// backing off, and end done with the remote applying each once; the 4xx one
// fails at once, stays listed, and blocks nothing — the other effects are
// done while the timed-out call still hangs on one of the two workers.
func TestRemoteFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{config: func(c *effects.Config) {
		c.Workers = 2
		c.Timeout = 3 * time.Second
		c.RetryBackoff = 100 * time.Millisecond
		c.MaxBackoff = time.Second
	}})
	hang, flaky, bad := intent(t, kindNotify, "hang"), intent(t, kindNotify, "flaky"), intent(t, kindNotify, "bad")
	kHang, kFlaky, kBad := hang.Key("notifier"), flaky.Key("notifier"), bad.Key("notifier")
	b.idem.setScript(func(key string, n int) reply {
		switch {
		case key == kHang && n == 1:
			return reply{hang: true} // applied; the answer never comes
		case key == kFlaky && n <= 2:
			return reply{status: http.StatusServiceUnavailable}
		case key == kBad:
			return reply{status: http.StatusUnprocessableEntity}
		}
		return reply{}
	})
	b.record(t, hang)
	b.start(t)
	b.idem.waitCalls(t, kHang, 1) // one worker is now stuck on it
	var fine []string
	intents := []effects.Intent{flaky, bad}
	for _, agg := range []string{"f1", "f2", "f3", "f4", "f5"} {
		in := intent(t, kindNotify, agg)
		intents = append(intents, in)
		fine = append(fine, in.Key("notifier"))
	}
	b.record(t, intents...)

	// Everything else settles on the other worker meanwhile.
	b.waitState(t, kBad, effects.Failed)
	b.waitState(t, kFlaky, effects.Done)
	for _, k := range fine {
		b.waitState(t, k, effects.Done)
	}
	e, err := b.fx.Get(t.Context(), kHang)
	require.NoError(t, err)
	require.Equal(t, effects.Running, e.State, "the hanging call has not timed out yet")
	require.Len(t, b.idem.callsOf(kHang), 1)

	// The hanging call times out; the retry reuses the key and the remote
	// applies it once.
	e = b.waitState(t, kHang, effects.Done)
	require.Equal(t, 2, e.Attempts)
	require.False(t, e.Uncertain)
	require.Len(t, b.idem.callsOf(kHang), 2)
	require.Equal(t, 1, b.idem.appliedOf(kHang))
	first := b.seen.of(kHang)[0]
	require.Equal(t, effects.Retrying, first.State)
	require.ErrorContains(t, first.Err, "deadline exceeded")

	// 5xx twice, then done: three calls, one key, the gaps backing off
	// (first retry after 50–100 ms, second after 100–200 ms, with jitter).
	calls := b.idem.callsOf(kFlaky)
	require.Len(t, calls, 3)
	require.Equal(t, 1, b.idem.appliedOf(kFlaky))
	require.GreaterOrEqual(t, calls[1].at.Sub(calls[0].at), 50*time.Millisecond)
	require.GreaterOrEqual(t, calls[2].at.Sub(calls[1].at), 100*time.Millisecond)

	// The permanent failure: one call, failed, not uncertain, listed, its
	// error kept.
	require.Len(t, b.idem.callsOf(kBad), 1)
	failed, err := b.fx.List(t.Context(), projection.ListOptions{State: string(effects.Failed)})
	require.NoError(t, err)
	require.Len(t, failed, 1)
	require.Equal(t, kBad, failed[0].Key)
	require.False(t, failed[0].Uncertain)
	require.Contains(t, failed[0].LastError, "422")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM river_job WHERE args->>'key' = $1 AND state = 'cancelled'`, kBad),
		"River stops retrying it")
	for _, k := range fine {
		require.Len(t, b.idem.callsOf(k), 1)
	}
	stats, err := b.fx.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, []effects.KindStats{{Kind: kindNotify, Failed: 1}, {Kind: kindChecked}}, stats)
}

// TestUncertainWithReconcile: a remote without idempotency that applied an
// effect and then timed out, or answered 5xx, is asked before the retry and
// not called again.
func TestUncertainWithReconcile(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{config: func(c *effects.Config) { c.Timeout = time.Second }})
	hang, oops, fresh := intent(t, kindChecked, "hang"), intent(t, kindChecked, "oops"), intent(t, kindChecked, "fresh")
	kHang, kOops, kFresh := hang.Key("notifier"), oops.Key("notifier"), fresh.Key("notifier")
	b.plain.setScript(func(key string, n int) reply {
		switch {
		case key == kHang && n == 1:
			return reply{hang: true}
		case key == kOops && n == 1:
			return reply{status: http.StatusBadGateway, apply: true}
		case key == kFresh && n == 1:
			return reply{status: http.StatusBadGateway} // failed before applying
		}
		return reply{}
	})
	b.record(t, hang, oops, fresh)
	b.start(t)
	for _, k := range []string{kHang, kOops} {
		e := b.waitState(t, k, effects.Done)
		require.Len(t, b.plain.callsOf(k), 1, "not called again")
		require.Equal(t, 1, b.plain.appliedOf(k))
		require.Equal(t, 1, b.plain.checksOf(k), "asked once, before the retry")
		require.Equal(t, 1, e.Attempts)
		require.False(t, e.Uncertain)
		as := b.seen.of(k)
		require.Len(t, as, 2)
		require.True(t, as[0].Called)
		require.Equal(t, effects.Retrying, as[0].State)
		require.True(t, as[1].Reconciled)
		require.False(t, as[1].Called)
		require.Equal(t, effects.Done, as[1].State)
	}
	// The remote said it does not have it: called again, applied once.
	e := b.waitState(t, kFresh, effects.Done)
	require.Len(t, b.plain.callsOf(kFresh), 2)
	require.Equal(t, 1, b.plain.appliedOf(kFresh))
	require.Equal(t, 1, b.plain.checksOf(kFresh))
	require.Equal(t, 2, e.Attempts)
}

// TestReconciliationPass: an effect whose attempts ran out with an uncertain
// outcome (the remote's status endpoint was down too) is failed; the
// reconciliation pass asks again later and, the remote having it, settles it
// as done without another call. One it does not have stays failed, now
// known not applied, and an operator's retry sends it.
func TestReconciliationPass(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{config: func(c *effects.Config) {
		c.MaxAttempts = 2
		c.ReconcileInterval = time.Hour // the test runs the pass itself
	}})
	had, lost := intent(t, kindChecked, "had"), intent(t, kindChecked, "lost")
	kHad, kLost := had.Key("notifier"), lost.Key("notifier")
	b.plain.setScript(func(key string, n int) reply {
		if n == 1 {
			return reply{status: http.StatusBadGateway, apply: key == kHad}
		}
		return reply{}
	})
	statusDown := true
	b.plain.setCheckScript(func(string, int) int {
		if statusDown {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	b.record(t, had, lost)
	b.start(t)
	for _, k := range []string{kHad, kLost} {
		e := b.waitState(t, k, effects.Failed)
		require.True(t, e.Uncertain)
		require.Contains(t, e.LastError, "reconcile")
		require.Len(t, b.plain.callsOf(k), 1)
	}
	b.plain.mu.Lock()
	statusDown = false
	b.plain.mu.Unlock()

	r, err := b.fx.ReconcileStuck(t.Context())
	require.NoError(t, err)
	require.Equal(t, effects.Reconciled{Checked: 2, Done: 1, NotDone: 1}, r)
	e, err := b.fx.Get(t.Context(), kHad)
	require.NoError(t, err)
	require.Equal(t, effects.Done, e.State)
	e, err = b.fx.Get(t.Context(), kLost)
	require.NoError(t, err)
	require.Equal(t, effects.Failed, e.State)
	require.False(t, e.Uncertain)
	r, err = b.fx.ReconcileStuck(t.Context())
	require.NoError(t, err)
	require.Zero(t, r, "nothing left to ask")

	_, err = b.fx.Retry(t.Context(), kLost)
	require.NoError(t, err)
	b.waitState(t, kLost, effects.Done)
	require.Len(t, b.plain.callsOf(kLost), 2)
	require.Equal(t, 1, b.plain.appliedOf(kLost))
	require.Len(t, b.plain.callsOf(kHad), 1)
	require.Equal(t, 1, b.plain.appliedOf(kHad))
}
