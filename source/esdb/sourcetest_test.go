package esdb_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"

	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/esdb"
	"github.com/inorder/inorder/source/sourcetest"
)

// sourceSubjects are the EventStoreDB source under the conformance suite of
// package sourcetest: a catch-up subscription, and a persistent
// subscription group whose consumers compete. Events go to stream
// <prefix><aggregate>, with the version in the metadata (a republished
// copy is a new event of the stream) and an event id derived from the
// fact, so a copy has the same id.
func sourceSubjects() []sourcetest.Subject {
	return []sourcetest.Subject{
		{Name: "esdb-catchup", New: newSourceCase, Consumer: sourceConsumer(false)},
		{Name: "esdb-persistent", New: newSourceCase, Consumer: sourceConsumer(true),
			Features: sourcetest.Features{CompetingConsumers: true, Redelivers: true}},
	}
}

func TestSourceConformance(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, sourceSubjects()...)
}

var sourceNS = uuid.MustParse("6d7c1f0e-2b1a-4c3d-9e8f-0a1b2c3d4e5f")

func newSourceCase(t *testing.T) *sourcetest.Case {
	e := newEnv(t)
	c := &sourcetest.Case{
		Env: map[string]string{"url": e.url, "prefix": e.prefix},
		Publish: func(ctx context.Context, msgs []sourcetest.Message) error {
			for _, m := range msgs {
				if m.Aggregate == "" {
					// The aggregate id is the stream's name after the
					// prefix: a stream named as the prefix alone is
					// outside it, and skipped.
					return fmt.Errorf("no aggregate id: %w", sourcetest.ErrUnrepresentable)
				}
				id := m.ID
				if id == "" {
					id = fmt.Sprintf("%s:%d", m.Aggregate, m.Version)
				}
				data := esdbc.EventData{
					EventID:     uuid.NewSHA1(sourceNS, []byte(id)),
					EventType:   m.Type,
					ContentType: esdbc.ContentTypeJson,
					Data:        m.Data,
					Metadata:    fmt.Appendf(nil, `{"version":%d}`, m.Version),
				}
				// Right after a restart the client may find the server
				// not ready yet: retry for a while (the same event id
				// makes a retry of an append that went through a
				// duplicate the server drops).
				for attempt := 0; ; attempt++ {
					_, err := e.client.AppendToStream(ctx, e.stream(m.Aggregate), esdbc.AppendToStreamOptions{}, data)
					if err == nil {
						break
					}
					if attempt == 50 || !hasUnavailable(err) {
						return err
					}
					if err := retry.Sleep(ctx, 100*time.Millisecond); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	if e.srv != nil {
		c.Restart = func(context.Context) error {
			e.srv.Stop()
			return e.srv.Restart()
		}
	}
	return c
}

// hasUnavailable reports whether err says the server was not there: the
// client's Unavailable, or a send that met the closed connection of the
// server that restarted ("could not send append request header … EOF",
// which the client reports with an unknown error code).
func hasUnavailable(err error) bool {
	var e *esdbc.Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code() == esdbc.ErrorUnavailable || errors.Is(err, io.EOF) || strings.HasSuffix(err.Error(), io.EOF.Error())
}

func sourceConsumer(persistent bool) func(context.Context, map[string]string, *sourcetest.ConsumerConfig) (source.Feed, error) {
	return func(_ context.Context, env map[string]string, cfg *sourcetest.ConsumerConfig) (source.Feed, error) {
		c := &esdb.Config{
			URL: env["url"], Processor: cfg.Processor, Name: cfg.Name, Logger: cfg.Logger,
			Workers: cfg.Workers, BatchSize: cfg.BatchSize, MaxWait: cfg.MaxWait, LagEvery: cfg.LagEvery,
			CheckpointEvery: 20 * time.Millisecond, RepairAfter: -1,
			ReconnectMin: 10 * time.Millisecond, ReconnectMax: 200 * time.Millisecond,
			Mapping:      esdb.Mapping{StreamPrefix: env["prefix"], VersionField: "version"},
			OnSubscribed: cfg.OnReady,
		}
		if persistent {
			c.Persistent = &esdb.Persistent{Group: env["prefix"] + cfg.Name}
		}
		src, err := esdb.New(c)
		if err != nil {
			return nil, err
		}
		return src.Feed(), nil
	}
}
