package nats

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	natsc "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/retry"
)

// NewMsg returns the message that carries e on subject, as the default
// Mapping reads it: the data as the payload, and the headers Nats-Msg-Id
// (e.StableID(): "<aggregate>:<version>" unless e.ID is set),
// Inorder-Aggregate, Inorder-Version, Inorder-Type and, when e has
// metadata, Inorder-Metadata (compacted to one line). The Nats-Msg-Id
// header lets JetStream store one message per fact: a publish repeated
// within the stream's duplicate window (two minutes by default) — a retry
// after a timeout, a producer that crashed and sends its outbox again — is
// acknowledged as a duplicate and not stored again.
func NewMsg(subject string, e aggregate.Event) (*natsc.Msg, error) {
	m := natsc.NewMsg(subject)
	m.Data = e.Data
	m.Header.Set(HeaderMsgID, e.StableID())
	m.Header.Set(HeaderAggregate, e.Aggregate)
	m.Header.Set(HeaderVersion, strconv.FormatInt(e.Version, 10))
	m.Header.Set(HeaderType, e.Type)
	if len(e.Metadata) > 0 {
		var b bytes.Buffer
		if err := json.Compact(&b, e.Metadata); err != nil {
			return nil, fmt.Errorf("nats: metadata of %s: %w", e.StableID(), err)
		}
		m.Header.Set(HeaderMetadata, b.String())
	}
	return m, nil
}

// Publish publishes e on subject (see NewMsg) and waits for the stream's
// acknowledgement. PubAck.Duplicate reports a message the stream already
// had. opts are passed to JetStream (an expected last sequence, say).
func Publish(ctx context.Context, js jetstream.JetStream, subject string, e aggregate.Event, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	m, err := NewMsg(subject, e)
	if err != nil {
		return nil, err
	}
	ack, err := js.PublishMsg(ctx, m, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats: publish %s: %w", e.StableID(), err)
	}
	return ack, nil
}

// PublishAsync publishes e on subject (see NewMsg) without waiting: the
// future resolves with the stream's acknowledgement. Wait for
// js.PublishAsyncComplete() before counting the events as stored.
func PublishAsync(js jetstream.JetStream, subject string, e aggregate.Event, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	m, err := NewMsg(subject, e)
	if err != nil {
		return nil, err
	}
	f, err := js.PublishMsgAsync(m, opts...)
	if err != nil {
		return nil, fmt.Errorf("nats: publish %s: %w", e.StableID(), err)
	}
	return f, nil
}

// PublishAll publishes events on the subjects subject(e) returns, with up
// to 1,000 publishes in flight (fewer when the client's
// PublishAsyncMaxPending, default 4,000, is reached), and waits until the stream acknowledged
// every one. It returns how many the stream stored as new (the others were
// duplicates within its window). A failed publish is retried with the same
// Nats-Msg-Id, so a retry never stores a fact twice.
func PublishAll(ctx context.Context, js jetstream.JetStream, subject func(aggregate.Event) string, events []aggregate.Event) (stored int, err error) {
	const inFlight = 1000
	type pending struct {
		f jetstream.PubAckFuture
		e aggregate.Event
	}
	var window []pending
	backoff := retryPolicy(50*time.Millisecond, time.Second)
	settle := func(p pending) error {
		select {
		case ack := <-p.f.Ok():
			if !ack.Duplicate {
				stored++
			}
			return nil
		case <-p.f.Err():
		case <-ctx.Done():
			return fmt.Errorf("nats: publish: %w", ctx.Err())
		}
		var err error
		for attempt := 1; attempt <= 5; attempt++ {
			var ack *jetstream.PubAck
			if ack, err = Publish(ctx, js, subject(p.e), p.e); err == nil {
				if !ack.Duplicate {
					stored++
				}
				return nil
			}
			if serr := retry.Sleep(ctx, backoff.Delay(attempt)); serr != nil {
				return fmt.Errorf("nats: publish: %w", serr)
			}
		}
		return err
	}
	flush := func() error {
		for _, p := range window {
			if err := settle(p); err != nil {
				return err
			}
		}
		window = window[:0]
		return nil
	}
	for _, e := range events {
		f, err := PublishAsync(js, subject(e), e)
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) && len(window) > 0 {
			// The client's own limit on publishes in flight (its
			// PublishAsyncMaxPending, lower than ours, or shared with other
			// publishers): wait for ours, then publish again.
			if err := flush(); err != nil {
				return stored, err
			}
			f, err = PublishAsync(js, subject(e), e)
		}
		if err != nil {
			return stored, err
		}
		window = append(window, pending{f, e})
		if len(window) >= inFlight {
			if err := flush(); err != nil {
				return stored, err
			}
		}
	}
	for _, p := range window {
		if err := settle(p); err != nil {
			return stored, err
		}
	}
	return stored, nil
}
