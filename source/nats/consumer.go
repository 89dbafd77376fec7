package nats

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
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
		return c, nil
	}
	c, err := js.CreateOrUpdateConsumer(ctx, s.cfg.Stream, s.cfg.consumerConfig())
	if err == nil {
		return c, nil
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && api.Code == 400 && !errors.Is(err, jetstream.ErrStreamNotFound) {
		if c, gerr := js.Consumer(ctx, s.cfg.Stream, s.cfg.Consumer); gerr == nil {
			s.log.Warn("nats consumer exists with a configuration the source cannot update; using it as it is",
				"name", s.cfg.Name, "consumer", s.cfg.Consumer, "error", err)
			return c, nil
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
