package kafka_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/proctest"
	"github.com/inorder/inorder/source/kafka"
)

// scaleRole is the child process of TestScaleOut: one member of the group.
const scaleRole = "kafka-scale-worker"

// scaleWorker consumes the topic of KAFKA_BROKERS/KAFKA_TOPIC into the
// ledger of DB_URL/DB_SCHEMA as a member of group "scale", saying
// ASSIGNED and REVOKED with the partitions, until SIGINT.
func scaleWorker(ctx context.Context, c *proctest.Child) error {
	proc, done, err := ledgertest.OpenProcessor(ctx, c.Getenv("DB_URL"), c.Getenv("DB_SCHEMA"), nil)
	if err != nil {
		return err
	}
	defer done()
	names := func(ps []kafka.Partition) string {
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = p.String()
		}
		return strings.Join(out, " ")
	}
	src, err := kafka.New(&kafka.Config{
		Brokers: strings.Split(c.Getenv("KAFKA_BROKERS"), ","), Topics: []string{c.Getenv("KAFKA_TOPIC")},
		Group: "scale", Processor: proc, Workers: 2, BatchSize: 100, MaxWait: 10 * time.Millisecond,
		LagEvery: -1, ClientOptions: groupOptions(),
		Logger:     slogStderr(),
		OnAssigned: func(ps []kafka.Partition) { c.Say("ASSIGNED", names(ps)) },
		OnRevoked:  func(ps []kafka.Partition, _ bool) { c.Say("REVOKED", names(ps)) },
	})
	if err != nil {
		return err
	}
	return src.Run(ctx)
}

// group tracks which worker owns which partition, from their lines.
type group struct {
	mu      sync.Mutex
	owner   map[string]string // partition -> worker
	changed chan struct{}
}

func (g *group) follow(p *proctest.Proc) {
	go func() {
		for m := range p.Messages() {
			g.mu.Lock()
			for _, part := range strings.Fields(m.Payload) {
				switch m.Kind {
				case "ASSIGNED":
					g.owner[part] = p.Name()
				case "REVOKED":
					if g.owner[part] == p.Name() {
						delete(g.owner, part)
					}
				}
			}
			g.mu.Unlock()
			g.signal()
		}
	}()
}

func (g *group) signal() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// forget drops the partitions of a worker that died.
func (g *group) forget(name string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for part, w := range g.owner {
		if w == name {
			delete(g.owner, part)
		}
	}
}

// waitHolds waits until the worker named name owns a partition.
func (g *group) waitHolds(t *testing.T, name string) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		g.mu.Lock()
		held := slices.Contains(slices.Collect(maps.Values(g.owner)), name)
		g.mu.Unlock()
		if held {
			return
		}
		select {
		case <-g.changed:
		case <-deadline.C:
			t.Fatalf("%s was assigned no partition", name)
		}
	}
}

// waitOwned waits until the live workers own every partition again.
func (g *group) waitOwned(t *testing.T) {
	t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		g.mu.Lock()
		n := len(g.owner)
		g.mu.Unlock()
		if n == testPartitions {
			return
		}
		select {
		case <-g.changed:
		case <-deadline.C:
			t.Fatalf("the group did not own every partition again (%d of %d)", n, testPartitions)
		}
	}
}

// TestScaleOut runs 3 worker processes in one group while records flow:
// workers are SIGKILLed and replaced, brokers fail, members join and leave
// (forced rebalances). The read model ends as the in-order fold — nothing
// lost, nothing applied twice — with nothing parked, quarantined or
// rejected, no worker logging an error, and lag 0; the handover time after
// each SIGKILL (until the survivors own every partition) is reported.
// INORDER_KAFKA_SCALE=full runs it longer on more events.
func TestScaleOut(t *testing.T) {
	t.Parallel()
	payments, rounds := 400, 6
	if os.Getenv("INORDER_KAFKA_SCALE") == "full" {
		payments, rounds = 5000, 24
	}
	c := newCluster(t)
	b := setup(t)
	events := ledger.Generate(rand.New(rand.NewPCG(9, 9)), payments, 6)
	pr := producer(t, c)
	env := map[string]string{"DB_URL": b.DB.URL, "DB_SCHEMA": b.DB.Schema,
		"KAFKA_BROKERS": strings.Join(c.ListenAddrs(), ","), "KAFKA_TOPIC": testTopic}
	g := &group{owner: map[string]string{}, changed: make(chan struct{}, 1)}
	n := 0
	spawn := func() *proctest.Proc {
		n++
		p := proctest.Start(t, scaleRole, proctest.Options{Name: fmt.Sprintf("w%d", n), Env: env})
		g.follow(p)
		return p
	}
	workers := []*proctest.Proc{spawn(), spawn(), spawn()}
	g.waitOwned(t)

	// Records flow during the whole run: a chunk after each fault.
	chunks := ledgertest.NewChunks(events, rounds+2)
	publish := func() {
		if !chunks.Done() {
			produce(t, pr, chunks.Next())
		}
	}
	publish()
	rng := rand.New(rand.NewPCG(10, 10))
	var handovers []time.Duration
	for round := range rounds {
		publish()
		switch round % 3 {
		case 0: // SIGKILL a worker, and start another
			i := rng.IntN(len(workers))
			killed := time.Now()
			workers[i].Kill(t)
			g.forget(workers[i].Name())
			g.waitOwned(t)
			handovers = append(handovers, time.Since(killed))
			workers[i] = spawn()
		case 1: // a broker fault
			brokerFault(c, time.Second)
		case 2: // a member joins, then leaves: two rebalances
			extra := spawn()
			// The group's follower reads every line of the worker's:
			// wait through it, never beside it.
			g.waitHolds(t, extra.Name())
			publish()
			extra.Interrupt(t)
			extra.RequireExit(t)
			g.waitOwned(t)
		}
	}
	for !chunks.Done() {
		publish()
	}

	lagger, err := kafka.New(&kafka.Config{Brokers: c.ListenAddrs(), Topics: []string{testTopic}, Group: "scale", Processor: b.Proc})
	require.NoError(t, err)
	waitFor(t, "lag 0", func() bool {
		l, err := lagger.MeasureLag(t.Context())
		return err == nil && l.Events == 0
	})
	proctest.StopAll(t, workers)
	b.RequireSettled(t, events)
	slices.Sort(handovers)
	t.Logf("scale-out: %d events, %d processes, %d rounds of faults; handover after SIGKILL (until every partition is owned again): %v",
		len(events), 3, rounds, handovers)
}
