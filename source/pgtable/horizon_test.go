package pgtable_test

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/inorder/inorder/internal/syncbuf"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/source/pgtable"
)

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer = syncbuf.Buffer

// A transaction left open (here: one that took an xid and idles) holds
// back the snapshot horizon: the events committed after it began are not
// delivered while it stays open. The source says so — a warning with the
// blocking backend's pid, Source.Blocker, the horizon metric — while the
// lag in seconds keeps growing; once the transaction ends, the events are
// delivered, the report clears and the lag falls to 0.
func TestHorizonHeldBackByOpenTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	events := ledger.Generate(rand.New(rand.NewPCG(5, 22)), 20, 4)
	before, after := events[:40], events[40:]
	require.NoError(t, b.w.Append(ctx, b.DB.Pool, before...))
	var logs syncBuffer
	s, err := pgtable.New(&pgtable.Config{Pool: b.DB.Pool, Processor: b.Proc, Workers: 2, BatchSize: 10, MaxWait: time.Millisecond,
		LagEvery: 50 * time.Millisecond, HorizonWarnAfter: 300 * time.Millisecond, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, s.RegisterMetrics(reg))
	stop := run(t, s)
	waitFor(t, "the first events applied", func() bool { return b.AppliedVersions(t) == len(before) })

	// The blocker: a transaction with an id, idle, on a connection of its
	// own — a session left "idle in transaction".
	conn, err := b.DB.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var pid int
	var xid string
	require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid(), pg_current_xact_id()::text`).Scan(&pid, &xid))
	require.NoError(t, b.w.Append(ctx, b.DB.Pool, after...)) // committed, behind the open transaction

	gauge := func() float64 {
		fams, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range fams {
			if f.GetName() == "inorder_source_horizon_blocked_seconds" {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("inorder_source_horizon_blocked_seconds not exported")
		return 0
	}
	var last string
	if !assert.Eventually(t, func() bool {
		bl, ok := s.Blocker()
		last = fmt.Sprintf("%v %+v", ok, bl)
		return ok && bl.PID == pid && gauge() >= 0.3
	}, time.Minute, 10*time.Millisecond) {
		t.Fatalf("the blocker (pid %d) not reported: last %s; logs:\n%s", pid, last, logs.String())
	}
	bl, _ := s.Blocker()
	require.Equal(t, "idle in transaction", bl.State)
	require.Contains(t, logs.String(), "holds back the snapshot horizon")
	require.Contains(t, logs.String(), "pid="+strconv.Itoa(pid))
	// Nothing of what was committed after it is delivered, and the lag
	// in seconds grows.
	lag1, err := s.MeasureLag(ctx)
	require.NoError(t, err)
	require.EqualValues(t, len(after), lag1.Events)
	time.Sleep(200 * time.Millisecond)
	lag2, err := s.MeasureLag(ctx)
	require.NoError(t, err)
	require.Greater(t, lag2.Behind, lag1.Behind, "the lag in seconds does not grow")
	require.Equal(t, len(before), b.AppliedVersions(t), "events delivered past an open transaction")

	require.NoError(t, tx.Rollback(ctx))
	waitFor(t, "every event applied once the transaction ended", func() bool { return b.AppliedVersions(t) == len(events) })
	waitFor(t, "the report cleared", func() bool {
		_, ok := s.Blocker()
		return !ok && gauge() == 0
	})
	waitFor(t, "the lag at 0", func() bool { return s.Lag().Events == 0 && s.Lag().Behind == 0 })
	require.Contains(t, logs.String(), "the snapshot horizon moves again")
	stop()
	b.RequireFold(t, events)
}
