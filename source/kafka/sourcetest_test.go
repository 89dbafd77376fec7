package kafka_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder/inorder/internal/proctest"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/kafka"
	"github.com/inorder/inorder/source/sourcetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(proctest.EnvRole) == scaleRole {
		proctest.Main(m, map[string]proctest.Role{scaleRole: scaleWorker})
	}
	sourcetest.Main(m, subject())
}

// subject is the Kafka source under the conformance suite: each case has a
// topic of its own, 12 partitions, on 3 in-process brokers (a cluster for
// the test binary; child processes reach it by its addresses). Restart is a
// broker fault (brokerFault): every broker closes every connection for a
// second, then partition leaders and the group coordinator move.
func subject() sourcetest.Subject {
	return sourcetest.Subject{
		Name: "kafka", New: newSuiteCase, Consumer: suiteConsumer,
		Features: sourcetest.Features{CompetingConsumers: true},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, subject())
}

var suiteTopics atomic.Int64

func newSuiteCase(t *testing.T) *sourcetest.Case {
	// A cluster per case: Restart restarts its brokers, and no other
	// case's.
	c := newCluster(t)
	topic := fmt.Sprintf("suite-%d", suiteTopics.Add(1))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchMaxBytes(4<<20), kgo.RetryTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, err := kadm.NewClient(cl).CreateTopic(t.Context(), testPartitions, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	var restartMu sync.Mutex
	return &sourcetest.Case{
		Env: map[string]string{"brokers": strings.Join(c.ListenAddrs(), ","), "topic": topic},
		Publish: func(ctx context.Context, msgs []sourcetest.Message) error {
			rs := make([]*kgo.Record, len(msgs))
			for i, m := range msgs {
				r := &kgo.Record{
					Value: m.Data,
					Headers: []kgo.RecordHeader{
						{Key: kafka.HeaderVersion, Value: strconv.AppendInt(nil, m.Version, 10)},
						{Key: kafka.HeaderType, Value: []byte(m.Type)},
					},
				}
				if m.Aggregate != "" {
					r.Key = []byte(m.Aggregate)
				}
				if m.ID != "" {
					r.Headers = append(r.Headers, kgo.RecordHeader{Key: kafka.HeaderID, Value: []byte(m.ID)})
				}
				if len(m.Metadata) > 0 {
					r.Headers = append(r.Headers, kgo.RecordHeader{Key: kafka.HeaderMetadata, Value: m.Metadata})
				}
				rs[i] = r
			}
			restartMu.Lock() // not while brokers restart
			defer restartMu.Unlock()
			return cl.ProduceSync(ctx, rs...).FirstErr()
		},
		Restart: func(ctx context.Context) error {
			restartMu.Lock()
			defer restartMu.Unlock()
			brokerFault(c, time.Second)
			return nil
		},
	}
}

func suiteConsumer(_ context.Context, env map[string]string, cfg *sourcetest.ConsumerConfig) (source.Feed, error) {
	var ready sync.Once
	src, err := kafka.New(&kafka.Config{
		Brokers: strings.Split(env["brokers"], ","), Topics: []string{env["topic"]},
		Group: env["topic"] + "-" + cfg.Name, Name: cfg.Name,
		Processor: cfg.Processor, Logger: cfg.Logger,
		Workers: cfg.Workers, BatchSize: cfg.BatchSize, MaxWait: cfg.MaxWait, LagEvery: cfg.LagEvery,
		CheckpointEvery: 50 * time.Millisecond,
		ClientOptions:   groupOptions(),
		OnAssigned: func([]kafka.Partition) {
			if cfg.OnReady != nil {
				ready.Do(cfg.OnReady)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	return src.Feed(), nil
}
