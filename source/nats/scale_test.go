package nats_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/proctest"
	"github.com/inorder/inorder/source/nats"
	"github.com/inorder/inorder/source/nats/natstest"
)

// scaleRole is the child process of TestScaleOut: one process of the
// durable consumer "scale".
const scaleRole = "nats-scale-worker"

// scaleAckWait is the AckWait of TestScaleOut's consumer: how long the
// messages a SIGKILLed process held wait before the server delivers them
// to another.
const scaleAckWait = 2 * time.Second

// scaleWorker consumes the stream NATS_STREAM of the cluster NATS_URL into
// the ledger of DB_URL/DB_SCHEMA as a process of the durable consumer
// "scale", saying SUBSCRIBED each time it starts pulling, until SIGINT.
func scaleWorker(ctx context.Context, c *proctest.Child) error {
	proc, done, err := ledgertest.OpenProcessor(ctx, c.Getenv("DB_URL"), c.Getenv("DB_SCHEMA"), nil)
	if err != nil {
		return err
	}
	defer done()
	src, err := nats.New(&nats.Config{
		URL: c.Getenv("NATS_URL"), Stream: c.Getenv("NATS_STREAM"), Consumer: "scale", Processor: proc,
		Workers: 2, BatchSize: 50, MaxWait: 10 * time.Millisecond, LagEvery: -1, AckWait: scaleAckWait,
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 500 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnSubscribed: func() { c.Say("SUBSCRIBED") },
	})
	if err != nil {
		return err
	}
	return src.Run(ctx)
}

// TestScaleOut runs 3 worker processes on one durable consumer of an R3
// stream on a 3-node cluster while events flow, shuffled: workers are
// SIGKILLed and replaced, the node leading the stream is killed and
// restarted, a process joins and leaves. The read model ends as the
// in-order fold — nothing lost, nothing applied twice — with nothing
// parked, quarantined or rejected, no worker logging an error, and lag 0.
// The handover after each SIGKILL — until every event published before
// the kill is applied, the killed process's unacknowledged share
// included, which the server delivers again once AckWait passed — is
// reported. INORDER_NATS_SCALE=full runs it longer on more events.
func TestScaleOut(t *testing.T) {
	t.Parallel()
	payments, rounds := 300, 9
	if os.Getenv("INORDER_NATS_SCALE") == "full" {
		payments, rounds = 5000, 24
	}
	cl := natstest.NewCluster(t, 3)
	e := newEnv(t, cl.URL(), 3)
	b := setup(t)
	events := ledger.Generate(rand.New(rand.NewPCG(11, 11)), payments, 6)
	rng := rand.New(rand.NewPCG(12, 12))
	env := map[string]string{"DB_URL": b.DB.URL, "DB_SCHEMA": b.DB.Schema, "NATS_URL": cl.URL(), "NATS_STREAM": e.stream}
	n := 0
	spawn := func() *proctest.Proc {
		n++
		p := proctest.Start(t, scaleRole, proctest.Options{Name: fmt.Sprintf("w%d", n), Env: env})
		p.Expect(t, "SUBSCRIBED")
		return p
	}
	workers := []*proctest.Proc{spawn(), spawn(), spawn()}

	// Events flow during the whole run: a chunk, shuffled, before each
	// fault.
	chunks := ledgertest.NewChunks(events, rounds+2)
	publish := func() {
		if !chunks.Done() {
			part := slices.Clone(chunks.Next())
			rng.Shuffle(len(part), func(i, j int) { part[i], part[j] = part[j], part[i] })
			e.publish(t, part)
		}
	}
	poll := ticks(t, 50*time.Millisecond)
	appliedAll := func(k int) func() bool {
		want := versionSum(events[:k])
		return func() bool { return b.AppliedVersions(t) >= want }
	}
	publish()
	var handovers []time.Duration
	for round := range rounds {
		publish()
		switch round % 3 {
		case 0: // SIGKILL a worker while it holds messages, and start another
			i := rng.IntN(len(workers))
			killed := time.Now()
			workers[i].Kill(t)
			waitFor(t, poll, appliedAll(chunks.Sent), "the events published before the SIGKILL to be applied")
			handovers = append(handovers, time.Since(killed))
			workers[i] = spawn()
		case 1: // the node leading the stream dies, and comes back
			leader := max(cl.Leader(e.stream), 0)
			require.NoError(t, cl.Bounce(t.Context(), leader, e.stream, 500*time.Millisecond))
		case 2: // a process joins, then leaves: its buffered messages go back
			extra := spawn()
			publish()
			extra.Interrupt(t)
			extra.RequireExit(t)
		}
	}
	for !chunks.Done() {
		publish()
	}

	lagger, err := nats.New(&nats.Config{URL: cl.URL(), Stream: e.stream, Consumer: "scale", Processor: b.Proc, LagEvery: -1})
	require.NoError(t, err)
	// The acks follow the commits, and the server counts them when it has
	// read them: poll.
	waitFor(t, poll, func() bool {
		l, err := lagger.MeasureLag(t.Context())
		return err == nil && l.Known && l.Events == 0 && appliedAll(len(events))()
	}, "every event applied and the lag at 0")
	proctest.StopAll(t, workers)
	b.RequireSettled(t, events)
	slices.Sort(handovers)
	t.Logf("scale-out: %d events, 3 processes on one durable consumer, R3 stream on 3 nodes, %d rounds of faults; "+
		"handover after SIGKILL (until every event published before it is applied; AckWait %v): %v",
		len(events), rounds, scaleAckWait, handovers)
}

// versionSum is what appliedVersions reads once events are applied: the
// sum of the payments' last versions.
func versionSum(events []aggregate.Event) int {
	last := map[string]int64{}
	for _, ev := range events {
		last[ev.Aggregate] = max(last[ev.Aggregate], ev.Version)
	}
	n := 0
	for _, v := range last {
		n += int(v)
	}
	return n
}
