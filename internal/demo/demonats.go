package demo

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	natsc "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/source/nats"
	"github.com/inorder/inorder/source/nats/natstest"
)

// The demo's stream, its subjects and the durable consumer its consumers
// share.
const (
	demoStream   = "INORDER_DEMO"
	demoSubject  = "demo"
	demoConsumer = "inorder-demo"
	// demoAckWait is how long the messages of the consumer cut off wait
	// before the server delivers them to the others.
	demoAckWait = 2 * time.Second
)

// consumeNATS starts an in-process NATS server with JetStream, publishes
// the workload to a stream (one subject per aggregate, with Nats-Msg-Id)
// while --consumers sources share one durable pull consumer, cuts one off
// halfway (its unacknowledged messages go to the others once AckWait
// passed), and runs until the whole workload is applied.
func (d *demoRun) consumeNATS(ctx context.Context) (demoStats, error) {
	dir, err := os.MkdirTemp("", "inorder-demo-nats-")
	if err != nil {
		return demoStats{}, fmt.Errorf("demo: NATS: %w", err)
	}
	d.cleanup = append(d.cleanup, func() { _ = os.RemoveAll(dir) })
	srv, err := natstest.Start(natstest.Options{Dir: dir})
	if err != nil {
		return demoStats{}, fmt.Errorf("demo: NATS: %w", err)
	}
	d.cleanup = append(d.cleanup, srv.Shutdown)
	nc, err := natsc.Connect(srv.URL(), natsc.MaxReconnects(-1))
	if err != nil {
		return demoStats{}, fmt.Errorf("demo: NATS: %w", err)
	}
	d.cleanup = append(d.cleanup, nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		return demoStats{}, fmt.Errorf("demo: NATS: %w", err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: demoStream, Subjects: []string{demoSubject + ".>"},
		Storage: jetstream.FileStorage}); err != nil {
		return demoStats{}, fmt.Errorf("demo: NATS stream: %w", err)
	}
	d.events = d.workload()
	total := int64(len(d.events))
	srcs, err := consumers(d, func() (*nats.Source, error) {
		return nats.New(&nats.Config{
			URL: srv.URL(), Stream: demoStream, Consumer: demoConsumer, Processor: d.proc, Name: "demo",
			Workers: 2, BatchSize: d.o.BatchSize, MaxWait: d.o.MaxWait, AckWait: demoAckWait,
			ReconnectMin: 20 * time.Millisecond, Logger: d.logger,
		})
	})
	if err != nil {
		return demoStats{}, err
	}
	running := runAll(ctx, srcs)
	defer running.stop()
	d.con.Printf([]any{"consumers", len(srcs), "url", srv.URL(), "stream", demoStream}, "publishing %d events to stream %s on the in-process NATS server at %s; %d consumers share durable consumer %q",
		total, demoStream, srv.URL(), len(srcs), demoConsumer)
	published := make(chan error, 1)
	go func() { published <- d.publishNATS(running.ctx, js) }()

	cut := len(srcs) > 1
	elapsed, err := d.await(ctx, awaiting{total: total, feed: published, stopAll: running.stopAll,
		each: func(events int64, bar *clikit.ProgressBar) {
			if cut && events >= total/2 {
				cut = false
				srcs[0].Abort() // its batches in flight roll back; its messages come again after AckWait
				bar.Note(fmt.Sprintf("consumer 1 cut off at %d events: its batches in flight roll back (or commit unheard), its unacknowledged messages go to the others after AckWait (%s)",
					events, demoAckWait))
			}
		}})
	if err != nil {
		return demoStats{}, err
	}
	return finish(d, running, nats.ErrAborted, elapsed, srcs, func(s *nats.Source) int64 { return s.Stats().Received },
		fmt.Sprintf("%d sharing one durable NATS consumer (one cut off halfway)", len(srcs)))
}

// publishNATS publishes the workload with the source's helper, in chunks,
// then a third of it again: republished events, which the stream's
// duplicate window absorbs (same Nats-Msg-Id).
func (d *demoRun) publishNATS(ctx context.Context, js jetstream.JetStream) error {
	subject := func(e aggregate.Event) string {
		return demoSubject + "." + strings.NewReplacer(".", "_", "*", "_", ">", "_", " ", "_").Replace(e.Aggregate)
	}
	all := make([]aggregate.Event, len(d.events))
	for i, e := range d.events {
		e.ID = demoEventID(e).String()
		all[i] = e
	}
	for events := all; len(events) > 0; {
		n := min(len(events), 500)
		if _, err := nats.PublishAll(ctx, js, subject, events[:n]); err != nil {
			return fmt.Errorf("demo: publish: %w", err)
		}
		events = events[n:]
	}
	if _, err := nats.PublishAll(ctx, js, subject, all[:len(all)/3]); err != nil {
		return fmt.Errorf("demo: publish: %w", err)
	}
	return nil
}
