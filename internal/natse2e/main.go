// Command natse2e measures inorder end to end from NATS JetStream: an
// in-process NATS server (one node, file storage) in a process of its own
// holding a ledger workload in a stream, and one or more 'inorder run
// --source nats://…' processes consuming it on one durable consumer, into a
// fresh schema. It reports the time from the start of the workers until
// every event is applied, events per second, the peak RSS of each process
// and the events parked (with several processes one aggregate's messages
// are spread over them; with -rebalance, one more process joins at half
// the run and leaves again), then checks that the read model equals the
// in-order fold of the workload (exit status 1 if not).
//
//	go build -o /tmp/inorder ./cmd/inorder
//	go run ./internal/natse2e -inorder /tmp/inorder -events 100000 -consumers 3
//
// The schema is dropped at the end (-keep keeps it). Progress is read from
// the gate's status every 250 ms (the sum of the applied versions), and the
// parked events from the workers' /metrics. See docs/benchmarks.md.
package main

import (
	"context"
	"os"

	natsc "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/e2eproc"
	"github.com/inorder/inorder/source/nats"
	"github.com/inorder/inorder/source/nats/natstest"
)

const stream = "PAYMENTS"

func main() {
	b := &e2eproc.Broker{
		Command: "natse2e", Server: "nats server", Prefix: "nats ", Loading: "publishing", Shared: "one durable consumer",
		Source: func(address, name string) string {
			return address + "/" + stream + "?consumer=" + name
		},
		Start: start,
	}
	b.Main()
}

// start runs the server with the workload published and returns its URL.
func start(ctx context.Context, events []aggregate.Event) (string, func(), error) {
	dir, err := os.MkdirTemp("", "natse2e-")
	if err != nil {
		return "", nil, err
	}
	srv, err := natstest.Start(natstest.Options{Dir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	stop := func() {
		srv.Shutdown()
		_ = os.RemoveAll(dir)
	}
	nc, err := natsc.Connect(srv.URL())
	if err != nil {
		stop()
		return "", nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		stop()
		return "", nil, err
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"payments.>"}, Storage: jetstream.FileStorage}); err != nil {
		stop()
		return "", nil, err
	}
	subject := func(e aggregate.Event) string { return "payments." + e.Aggregate }
	for all := events; len(all) > 0; {
		n := min(len(all), 5000)
		if _, err := nats.PublishAll(ctx, js, subject, all[:n]); err != nil {
			stop()
			return "", nil, err
		}
		all = all[n:]
	}
	return srv.URL(), stop, nil
}
