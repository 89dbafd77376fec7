package sourcetest

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// Message is one event as the suite publishes it; each source encodes it in
// its own envelope (a row, a stream event, a message with headers).
type Message struct {
	// ID is the event's stable id. Empty: the source derives its own from
	// Aggregate and Version (aggregate.DefaultID, or a name-based UUID), the
	// same for every copy of the message.
	ID string
	// Aggregate and Version identify the fact; Type names it.
	Aggregate string
	Version   int64
	Type      string
	// Data is the payload (JSON, except in hostile messages); Metadata is
	// optional.
	Data, Metadata []byte
}

// ErrUnrepresentable is returned (wrapped) by Case.Publish for a hostile
// message the source's envelope cannot carry at all — a stream name cannot
// be empty, a column refuses a NUL byte — so that no consumer can ever see
// it. The suite logs it and checks the other messages.
var ErrUnrepresentable = errors.New("sourcetest: the source's envelope cannot carry this message")

// Subject is a source under test.
type Subject struct {
	// Name names the subject in sub-tests and child processes; unique
	// within a test binary. Required.
	Name string

	// Features says which optional checks apply.
	Features Features

	// New prepares an isolated case for one check: its own stream, table,
	// topic or prefix on the source's server, removed when t ends.
	// It is called from parallel sub-tests. Required.
	New func(t *testing.T) *Case

	// Consumer returns a consumer of the case whose Case.Env is env,
	// feeding cfg.Processor; the suite runs it (Feed.Run) and measures its
	// lag. It is called in the test process and in child processes, so it
	// must build everything from env. Consumers given the same cfg.Name
	// consume as one: one checkpoint, one durable consumer, one group.
	// Required.
	Consumer func(ctx context.Context, env map[string]string, cfg *ConsumerConfig) (source.Feed, error)
}

// Features says what a source can do.
type Features struct {
	// CompetingConsumers: consumers with the same ConsumerConfig.Name in
	// several processes share the work (a persistent subscription group, a
	// durable consumer, a consumer group, leases on partitions), and the
	// share of one that dies goes to the others. Enables Share.
	CompetingConsumers bool

	// Redelivers: deliveries of a failed batch are given back to the
	// server, which delivers them again (a nack); otherwise the source's
	// workers retry them. Failures checks both alike; this is reported.
	Redelivers bool

	// Aggregates and Versions size the streams of Fold, SIGKILL and Share.
	// Defaults 40 and 8.
	Aggregates, Versions int

	// Timeout bounds each check. Default 2 minutes.
	Timeout time.Duration

	// Only, if set, names the checks to run ("Fold", "Restart"…): for a
	// variant of a source whose cases are costly (a server of their own)
	// and that adds to what another subject checks.
	Only []string
}

func (f Features) withDefaults() Features {
	f.Aggregates = cmp.Or(f.Aggregates, 40)
	f.Versions = cmp.Or(f.Versions, 8)
	f.Timeout = cmp.Or(f.Timeout, 2*time.Minute)
	return f
}

// Case is one check's isolated part of the source's server.
type Case struct {
	// Env is what Subject.Consumer needs to reach the case from another
	// process: addresses, names. Required (it may be empty).
	Env map[string]string

	// Publish appends msgs to the source in order and returns once they
	// are durable. A message may repeat an earlier one: a republished
	// copy. It is called from one goroutine at a time. Required.
	Publish func(ctx context.Context, msgs []Message) error

	// Hold, if set, begins publishing msgs in a transaction that takes
	// their positions now and returns a function that commits it — a slow
	// writer, committing after later ones. Sources whose positions are
	// handed out at commit have none. Enables Gap.
	Hold func(ctx context.Context, msgs []Message) (commit func(context.Context) error, err error)

	// Restart, if set, restarts the source's server (or, where it is not
	// the test's to restart, breaks every connection to it) and returns
	// once it accepts connections again. Enables Restart.
	Restart func(ctx context.Context) error
}

// ConsumerConfig is what the suite asks of a consumer.
type ConsumerConfig struct {
	// Processor is the processor to feed.
	Processor *projection.Processor
	// Name is the consumer's name: its checkpoint row, durable consumer or
	// group, and the source label of its metrics. Consumers with the same
	// Name consume as one.
	Name string
	// Workers, BatchSize and MaxWait configure its dispatcher (package
	// source).
	Workers, BatchSize int
	MaxWait            time.Duration
	// LagEvery is how often Run measures the lag (the suite also calls
	// MeasureLag).
	LagEvery time.Duration
	// Logger receives its logs.
	Logger *slog.Logger
	// OnReady, if set, must be called once the consumer is subscribed, or
	// holds its share of the work: the suite publishes to several
	// consumers only once all are ready.
	OnReady func()
}

// Run runs the suite on each subject: on one, as parallel sub-tests of t;
// on several, in a parallel sub-test of t per subject, named by its Name.
func Run(t *testing.T, subjects ...Subject) {
	t.Helper()
	if len(subjects) == 1 {
		run(t, subjects[0])
		return
	}
	for _, s := range subjects {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			run(t, s)
		})
	}
}

// run runs the suite on s, as parallel sub-tests of t.
func run(t *testing.T, s Subject) {
	t.Helper()
	if s.Name == "" || s.New == nil || s.Consumer == nil {
		t.Fatal("sourcetest: Subject.Name, New and Consumer are required")
	}
	r := &runner{s: s, f: s.Features.withDefaults()}
	checks := []struct {
		name string
		run  func(t *testing.T, c *tcase)
		when func(c *Case) bool
		why  string
	}{
		{name: "Fold", run: r.fold},
		{name: "Lag", run: r.lag},
		{name: "SIGKILL", run: r.sigkill},
		{name: "Failures", run: r.failures},
		{name: "Hostile", run: r.hostile},
		{name: "Gap", run: r.gap, when: func(c *Case) bool { return c.Hold != nil },
			why: "the source's positions are handed out at commit (Case.Hold is nil): a late commit cannot leave a hole"},
		{name: "Restart", run: r.restart, when: func(c *Case) bool { return c.Restart != nil },
			why: "Case.Restart is nil"},
		{name: "Share", run: r.share, when: func(*Case) bool { return r.f.CompetingConsumers },
			why: "Features.CompetingConsumers is off: consumers of one name do not share the work"},
	}
	for _, ch := range checks {
		if len(r.f.Only) > 0 && !slices.Contains(r.f.Only, ch.name) {
			continue
		}
		t.Run(ch.name, func(t *testing.T) {
			t.Parallel()
			c := r.newCase(t)
			if ch.when != nil && !ch.when(c.Case) {
				// Not applicable to this source: say why, and do not
				// count it as a pass.
				t.Skipf("sourcetest: %s does not apply: %s", ch.name, ch.why)
			}
			ch.run(t, c)
		})
	}
}
