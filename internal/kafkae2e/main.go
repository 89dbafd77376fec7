// Command kafkae2e measures inorder end to end from Kafka: kfake brokers (3,
// 12 partitions) in a process of their own holding a ledger workload, and
// one or more 'inorder run --source kafka://…' processes consuming it, as
// one group, into a fresh schema. It reports the time from the start of the
// workers until every event is applied, events per second, the peak RSS of
// each process and the events parked (by the group's rebalances: with
// -rebalance, one more process joins at half the run and leaves again), then
// checks that the read model equals the in-order fold of the workload (exit
// status 1 if not).
//
//	go build -o /tmp/inorder ./cmd/inorder
//	go run ./internal/kafkae2e -inorder /tmp/inorder -events 100000 -consumers 3 -rebalance
//
// The schema is dropped at the end (-keep keeps it). Progress is read from
// the gate's status every 250 ms (the sum of the applied versions), and the
// parked events from the workers' /metrics. See docs/benchmarks.md.
package main

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/e2eproc"
	"github.com/inorder/inorder/source/kafka"
)

const topic = "payments"

func main() {
	b := &e2eproc.Broker{
		Command: "kafkae2e", Server: "brokers", Prefix: "brokers ", Loading: "producing", Shared: "one group",
		Source: func(address, name string) string {
			return "kafka://" + address + "/" + topic + "?group=" + name
		},
		RunArgs: []string{"--kafka-session-timeout", "6s"},
		Start:   start,
	}
	b.Main()
}

// start runs the brokers with the workload produced and returns their
// addresses.
func start(ctx context.Context, events []aggregate.Event) (string, func(), error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(12, topic))
	if err != nil {
		return "", nil, err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		c.Close()
		return "", nil, err
	}
	defer cl.Close()
	rs := make([]*kgo.Record, 0, 5000)
	flush := func() error {
		err := cl.ProduceSync(ctx, rs...).FirstErr()
		rs = rs[:0]
		return err
	}
	for _, ev := range events {
		if rs = append(rs, kafka.NewRecord(topic, ev)); len(rs) == cap(rs) {
			if err := flush(); err != nil {
				c.Close()
				return "", nil, err
			}
		}
	}
	if err := flush(); err != nil {
		c.Close()
		return "", nil, err
	}
	return strings.Join(c.ListenAddrs(), ","), c.Close, nil
}
