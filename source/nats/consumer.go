package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/inorder/inorder/internal/retry"
)

// ErrRejected is wrapped by the error Run returns when the server rejects
// what the source asks for good — JetStream is not enabled for the account,
// the consumer does not exist while Config.NoCreate is set, the filter
// subjects are invalid. Retrying cannot help: Run stops (after draining what
// it received) instead of trying for ever, and the error says what to fix.
// Transient failures (a node down or restarting, a leader election, a stream
// that does not exist yet) are retried, and logged.
var ErrRejected = errors.New("nats: rejected by the server")

// ConsumerConfig returns the configuration the source creates (or updates)
// its durable consumer with: explicit acks, AckWait and MaxAckPending from
// the window (see Config), no limit on deliveries (a message whose handler
// keeps failing is quarantined by the processor, then acknowledged), the
// filter subjects, and DeliverAll (DeliverNew with FromEnd).
func (s *Source) ConsumerConfig() jetstream.ConsumerConfig { return s.cfg.consumerConfig() }

func (c *config) consumerConfig() jetstream.ConsumerConfig {
	cc := jetstream.ConsumerConfig{
		Durable:       c.Consumer,
		Description:   "inorder source " + c.Name,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxAckPending: c.MaxAckPending,
		MaxDeliver:    -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
	}
	if c.FromEnd {
		cc.DeliverPolicy = jetstream.DeliverNewPolicy
	}
	switch len(c.Subjects) {
	case 0:
	case 1:
		cc.FilterSubject = c.Subjects[0]
	default:
		cc.FilterSubjects = c.Subjects
	}
	return cc
}

// bind returns the consumer: created or updated to consumerConfig, or as it
// is with NoCreate. An existing consumer whose configuration cannot be
// changed so (its deliver policy, say) is used as it is, with a warning.
func (s *Source) bind(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	if s.cfg.NoCreate {
		c, err := js.Consumer(ctx, s.cfg.Stream, s.cfg.Consumer)
		if err != nil {
			return nil, fmt.Errorf("nats: consumer %s on stream %s: %w", s.cfg.Consumer, s.cfg.Stream, err)
		}
		return c, waitLeader(ctx, c, clustered(js))
	}
	want := s.cfg.consumerConfig()
	// A consumer already as wanted is used as it is: an update, even one
	// that changes nothing, goes through the cluster's meta leader, and
	// every process would send one each time it consumes again.
	if c, err := js.Consumer(ctx, s.cfg.Stream, s.cfg.Consumer); err == nil && sameConfig(c.CachedInfo().Config, want) {
		return c, waitLeader(ctx, c, clustered(js))
	}
	c, err := js.CreateOrUpdateConsumer(ctx, s.cfg.Stream, want)
	if err == nil {
		return c, waitLeader(ctx, c, clustered(js))
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && api.Code == 400 && !errors.Is(err, jetstream.ErrStreamNotFound) {
		if c, gerr := js.Consumer(ctx, s.cfg.Stream, s.cfg.Consumer); gerr == nil {
			s.log.Warn("nats consumer exists with a configuration the source cannot update; using it as it is",
				"name", s.cfg.Name, "consumer", s.cfg.Consumer, "error", err)
			return c, waitLeader(ctx, c, clustered(js))
		}
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("nats: stream %s not found (create it, or fix Config.Stream): %w", s.cfg.Stream, err)
	}
	return nil, fmt.Errorf("nats: create consumer %s on stream %s: %w", s.cfg.Consumer, s.cfg.Stream, err)
}

// rejected returns an error wrapping ErrRejected when err means the server
// rejects what the source asks for good, else nil.
func (s *Source) rejected(err error) error {
	if err == nil {
		return nil
	}
	var what string
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		what = "JetStream is not enabled on the server or for this account"
	case s.cfg.NoCreate && (errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted)):
		what = fmt.Sprintf("consumer %q on stream %q does not exist, and the source must not create it (NoCreate): create it, or let the source do it",
			s.cfg.Consumer, s.cfg.Stream)
	case errors.Is(err, jetstream.ErrOverlappingFilterSubjects), errors.Is(err, jetstream.ErrEmptyFilter),
		errors.Is(err, jetstream.ErrDuplicateFilterSubjects):
		what = "the filter subjects are invalid"
	case errors.Is(err, jetstream.ErrBadRequest):
		what = "the server finds the pull request invalid"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s: %w", ErrRejected, what, err)
}

// waitLeader waits until the consumer has a leader. On a cluster the
// server answers a consumer's creation before its replicas have elected
// one, and a pull request sent before then is lost silently when the
// leader is elected (it starts with an empty queue of waiting requests):
// the process receives nothing until the missing heartbeats (half of
// pullExpiry) make it pull again, while the other processes of the
// consumer take its share.
//
// A consumer that is found (not created) in that moment is described with
// no cluster information at all — the node answering has the consumer but
// not its raft group yet — which is also how a server that is not in a
// cluster describes every consumer: on a cluster (clustered), no cluster
// information means no leader yet. Taking it for a leader made the
// processes that found the consumer just created by another pull too
// early: in about half the runs of three processes starting together, two
// lost their pull and one received all the work for 5 s (the conformance
// suite's Share check on the 3-node cluster).
func waitLeader(ctx context.Context, c jetstream.Consumer, clustered bool) error {
	ci := c.CachedInfo()
	for (ci.Cluster == nil && clustered) || (ci.Cluster != nil && ci.Cluster.Leader == "") {
		if err := retry.Sleep(ctx, 20*time.Millisecond); err != nil {
			return fmt.Errorf("nats: consumer %s has no leader: %w", ci.Name, err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			return fmt.Errorf("nats: consumer %s: %w", ci.Name, err)
		}
		ci = info
	}
	return nil
}

// clustered reports whether the server js is connected to is part of a
// cluster.
func clustered(js jetstream.JetStream) bool { return js.Conn().ConnectedClusterName() != "" }

// sameConfig reports whether the consumer's configuration has what the
// source sets.
func sameConfig(have, want jetstream.ConsumerConfig) bool {
	return have.Durable == want.Durable && have.Description == want.Description &&
		have.AckPolicy == want.AckPolicy && have.AckWait == want.AckWait &&
		have.MaxAckPending == want.MaxAckPending && have.MaxDeliver == want.MaxDeliver &&
		have.DeliverPolicy == want.DeliverPolicy && have.ReplayPolicy == want.ReplayPolicy &&
		have.FilterSubject == want.FilterSubject && slices.Equal(have.FilterSubjects, want.FilterSubjects)
}
