package nats_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	natsc "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inorder/inorder/internal/proctest"
	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/nats"
	"github.com/inorder/inorder/source/nats/natstest"
	"github.com/inorder/inorder/source/sourcetest"
)

func TestMain(m *testing.M) {
	if os.Getenv(proctest.EnvRole) == scaleRole {
		proctest.Main(m, map[string]proctest.Role{scaleRole: scaleWorker})
	}
	sourcetest.Main(m, sourceSubjects()...)
}

// sourceSubjects are the NATS source under the conformance suite: on a
// single node of its own per case (restarted by the Restart check), and on
// a three-node cluster of its own per case holding an R3 stream, whose
// Restart kills the node leading the stream, waits for another to take the
// lead, and starts it again. The cluster runs the checks where replication
// and failover matter: the fold, redelivery after a SIGKILL, a node's
// death, and three processes sharing the consumer (Share: it failed on the
// cluster in about half the runs, one process getting all the work, until
// the source waited for the consumer's leader also when the node answering
// did not know the consumer's raft group yet; see waitLeader).
func sourceSubjects() []sourcetest.Subject {
	f := sourcetest.Features{CompetingConsumers: true, Redelivers: true}
	cf := f
	cf.Only = []string{"Fold", "SIGKILL", "Restart", "Share"}
	return []sourcetest.Subject{
		{Name: "nats", Features: f, Consumer: sourceConsumer, New: func(t *testing.T) *sourcetest.Case {
			srv := natstest.New(t)
			c := newSourceCase(t, srv.URL(), 1)
			c.Restart = func(context.Context) error { return srv.Restart() }
			return c
		}},
		{Name: "nats-cluster", Features: cf, Consumer: sourceConsumer, New: func(t *testing.T) *sourcetest.Case {
			cl := natstest.NewCluster(t, 3)
			c := newSourceCase(t, cl.URL(), 3)
			stream := c.Env["stream"]
			c.Restart = func(ctx context.Context) error {
				i := max(cl.Leader(stream), 0)
				t.Logf("killing node %d of 3 (the stream's leader), then restarting it", i+1)
				return cl.Bounce(ctx, i, stream, 200*time.Millisecond)
			}
			return c
		}},
	}
}

func TestSourceConformance(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, sourceSubjects()...)
}

func newSourceCase(t *testing.T, url string, replicas int) *sourcetest.Case {
	e := newEnv(t, url, replicas)
	return &sourcetest.Case{
		Env: map[string]string{"url": url, "stream": e.stream, "prefix": strings.ToLower(e.stream)},
		Publish: func(ctx context.Context, msgs []sourcetest.Message) error {
			for _, m := range msgs {
				if err := publishMessage(ctx, e, m); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// publishMessage publishes m as the publishing helpers do, with one
// difference: copies of a message must reach the consumer, so the
// Nats-Msg-Id (which the stream's duplicate window would absorb) carries a
// fresh uuid, and the event id the mapping reads is in a header of its own.
func publishMessage(ctx context.Context, e *env, m sourcetest.Message) error {
	id := m.ID
	if id == "" {
		id = fmt.Sprintf("%s:%d", m.Aggregate, m.Version)
	}
	for _, v := range []string{m.Aggregate, m.Type, id, string(m.Metadata)} {
		if strings.ContainsAny(v, "\r\n") {
			return fmt.Errorf("a line break in a header: %w", sourcetest.ErrUnrepresentable)
		}
	}
	msg := natsc.NewMsg(e.subject + ".x")
	msg.Data = m.Data
	msg.Header.Set(natsc.MsgIdHdr, uuid.NewString())
	msg.Header.Set("Event-Id", id)
	if m.Aggregate != "" {
		msg.Header.Set(nats.HeaderAggregate, m.Aggregate)
	}
	msg.Header.Set(nats.HeaderVersion, strconv.FormatInt(m.Version, 10))
	msg.Header.Set(nats.HeaderType, m.Type)
	if len(m.Metadata) > 0 {
		msg.Header.Set(nats.HeaderMetadata, string(m.Metadata))
	}
	// Right after a restart the server may not answer yet: retry (the
	// same Nats-Msg-Id makes a retry of a publish that went through a
	// duplicate the stream drops).
	for attempt := 0; ; attempt++ {
		_, err := e.js.PublishMsg(ctx, msg, jetstream.WithRetryAttempts(5))
		if err == nil {
			return nil
		}
		if attempt == 100 || ctx.Err() != nil {
			return err
		}
		if err := retry.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

func sourceConsumer(_ context.Context, env map[string]string, cfg *sourcetest.ConsumerConfig) (source.Feed, error) {
	src, err := nats.New(&nats.Config{
		URL: env["url"], Stream: env["stream"], Consumer: cfg.Name, Processor: cfg.Processor, Name: cfg.Name, Logger: cfg.Logger,
		Workers: cfg.Workers, BatchSize: cfg.BatchSize, MaxWait: cfg.MaxWait, LagEvery: cfg.LagEvery,
		Mapping:      nats.Mapping{ID: "header:Event-Id"},
		AckWait:      2 * time.Second,
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
		OnSubscribed: cfg.OnReady,
	})
	if err != nil {
		return nil, err
	}
	return src.Feed(), nil
}
