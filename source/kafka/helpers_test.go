package kafka_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/kafka"
)

// waitTimeout bounds every wait of these tests.
const waitTimeout = 90 * time.Second

const (
	testTopic      = "payments"
	testPartitions = 12
)

// newCluster starts 3 in-process brokers with the test topic in 12
// partitions, and short group timeouts so that a member that died is
// replaced in seconds.
func newCluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{
		kfake.NumBrokers(3),
		kfake.SeedTopics(testPartitions, testTopic),
		kfake.GroupMinSessionTimeout(500 * time.Millisecond),
	}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// groupOptions are client options for fast failure detection in tests.
func groupOptions() []kgo.Opt {
	return []kgo.Opt{
		kgo.SessionTimeout(3 * time.Second),
		kgo.HeartbeatInterval(300 * time.Millisecond),
		kgo.RebalanceTimeout(20 * time.Second),
		kgo.FetchMaxWait(200 * time.Millisecond),
	}
}

// producer returns a client that produces to c.
func producer(t testing.TB, c *kfake.Cluster) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(testTopic))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

// produce writes events, in order, as NewRecord makes them.
func produce(t testing.TB, cl *kgo.Client, events []aggregate.Event) {
	t.Helper()
	rs := make([]*kgo.Record, len(events))
	for i, e := range events {
		rs[i] = kafka.NewRecord(testTopic, e)
	}
	for len(rs) > 0 {
		n := min(len(rs), 5000)
		require.NoError(t, cl.ProduceSync(t.Context(), rs[:n]...).FirstErr())
		rs = rs[n:]
	}
}

type bundle struct{ *ledgertest.Bundle }

func setup(t testing.TB) *bundle { return &bundle{ledgertest.New(t)} }

// counts returns the ledger's deliveries by outcome.
func (b *bundle) counts() projection.Counts { return b.Proc.Counts()["ledger"] }

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("KAFKA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// running is a Source run by a test.
type running struct {
	src    *kafka.Source
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// start runs a source of cfg (Brokers, Processor and the test's options
// filled in) until stop or the end of the test.
func start(t testing.TB, c *kfake.Cluster, b *bundle, cfg kafka.Config) *running {
	t.Helper()
	cfg.Brokers = c.ListenAddrs()
	if cfg.Topics == nil {
		cfg.Topics = []string{testTopic}
	}
	cfg.Processor = b.Proc
	// No test run in process kills its member: a long session, so that a
	// busy machine's late heartbeats do not end it (a lost session would
	// hand partitions over undrained).
	cfg.ClientOptions = append(append(groupOptions(), kgo.SessionTimeout(20*time.Second)), cfg.ClientOptions...)
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.MaxWait == 0 {
		cfg.MaxWait = 10 * time.Millisecond
	}
	src, err := kafka.New(&cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{src: src, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- src.Run(ctx) }()
	t.Cleanup(func() { _ = r.stop() })
	return r
}

// stop stops the source gracefully and returns Run's error.
func (r *running) stop() error {
	r.once.Do(func() {
		r.cancel()
		r.err = <-r.done
	})
	return r.err
}

// waitFor polls cond every few milliseconds until it holds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requireCaughtUp requires lag 0, with every partition's checkpoint at the
// end of what was produced.
func requireCaughtUp(t testing.TB, src *kafka.Source) {
	t.Helper()
	var lag kafka.Lag
	waitFor(t, "lag 0", func() bool {
		var err error
		lag, err = src.MeasureLag(t.Context())
		return err == nil && lag.Events == 0
	})
	require.Len(t, lag.Partitions, testPartitions)
	for _, p := range lag.Partitions {
		if p.End > 0 {
			require.Equal(t, p.End-1, p.Checkpoint, "partition %v", p.Partition)
		}
	}
	require.Zero(t, lag.Behind)
}

// brokerFault is kfake's fault injection for a broker outage: for d every
// broker closes the connection of every request it receives; then every
// partition gets a new leader and the group coordinator moves. (Removing a
// broker and adding it back under its id left kfake's idempotent producer
// state behind, and producers stuck: the outage is the fault a client sees
// of a restart.)
func brokerFault(c *kfake.Cluster, d time.Duration) {
	var over atomic.Bool
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		if over.Load() {
			c.DropControl()
			return nil, nil, false
		}
		c.KeepControl()
		return nil, errors.New("kfake: broker down"), true
	})
	t := time.NewTimer(d)
	<-t.C
	over.Store(true)
	c.ShufflePartitionLeaders()
	c.RehashCoordinators()
}

// slogStderr logs warnings and errors to stderr: a child's, for its test's
// failure report.
func slogStderr() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
