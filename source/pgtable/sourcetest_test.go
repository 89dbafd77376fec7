package pgtable_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/pgtable"
	"github.com/inorder/inorder/source/sourcetest"
)

func TestMain(m *testing.M) { sourcetest.Main(m, subjects()...) }

// subjects are the events-table source under the conformance suite:
//   - pgtable: inorder's own table (Append), in the case's schema of the
//     test database, woken by NOTIFY; three processes share its 16
//     partitions;
//   - pgtable-outbox: an application's outbox table, its columns mapped,
//     4 partitions, no NOTIFY (polling), where copies and hostile rows are
//     stored as they come.
func subjects() []sourcetest.Subject {
	return []sourcetest.Subject{
		{Name: "pgtable", New: newOwnCase, Consumer: consumer(false),
			Features: sourcetest.Features{CompetingConsumers: true}},
		{Name: "pgtable-outbox", New: newOutboxCase, Consumer: consumer(true),
			Features: sourcetest.Features{Only: []string{"Fold", "Lag", "SIGKILL", "Hostile", "Gap"}}},
		otherDBSubject(),
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sourcetest.Run(t, subjects()...)
}

func consumer(outbox bool, opts ...func(*pgtable.Config)) func(context.Context, map[string]string, *sourcetest.ConsumerConfig) (source.Feed, error) {
	return func(ctx context.Context, env map[string]string, cfg *sourcetest.ConsumerConfig) (source.Feed, error) {
		c := &pgtable.Config{
			URL: env["url"], Processor: cfg.Processor, Name: cfg.Name, Schema: env["schema"], Logger: cfg.Logger,
			Workers: cfg.Workers, BatchSize: cfg.BatchSize, MaxWait: cfg.MaxWait, LagEvery: cfg.LagEvery, OnReady: cfg.OnReady,
			LeaseEvery: 100 * time.Millisecond, CheckpointEvery: 20 * time.Millisecond, PollInterval: 200 * time.Millisecond,
		}
		if outbox {
			c.Table, c.Partitions, c.PollInterval = outboxTable, 4, 20*time.Millisecond
		}
		for _, o := range opts {
			o(c)
		}
		return pgtable.New(c)
	}
}

// newOwnCase is a schema with inorder's tables, its events table included.
func newOwnCase(t *testing.T) *sourcetest.Case {
	db := pgtest.NewMigrated(t)
	w := pgtable.NewWriter(db.Schema, &aggregate.Limits{MaxPayload: -1})
	return &sourcetest.Case{
		Env: map[string]string{"url": db.URL, "schema": db.Schema},
		Publish: func(ctx context.Context, msgs []sourcetest.Message) error {
			for _, m := range msgs {
				if err := appendOwn(ctx, db.Pool, w, m); err != nil {
					return err
				}
			}
			return nil
		},
		Hold: func(ctx context.Context, msgs []sourcetest.Message) (func(context.Context) error, error) {
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				return nil, err
			}
			for _, m := range msgs {
				if err := w.Append(ctx, tx, event(m)); err != nil {
					_ = tx.Rollback(ctx)
					return nil, err
				}
			}
			return tx.Commit, nil
		},
	}
}

func event(m sourcetest.Message) aggregate.Event {
	return aggregate.Event{ID: m.ID, Aggregate: m.Aggregate, Version: m.Version, Type: m.Type, Data: m.Data, Metadata: m.Metadata}
}

// appendOwn appends m with Append; a message Append refuses as invalid is
// inserted as a writer bypassing Append would, if the table's constraints
// let it.
func appendOwn(ctx context.Context, pool *pgxpool.Pool, w *pgtable.Writer, m sourcetest.Message) error {
	err := w.Append(ctx, pool, event(m))
	var verr *aggregate.ValidationError
	if !errors.As(err, &verr) {
		return err
	}
	_, err = pool.Exec(ctx, `INSERT INTO events (aggregate, version, id, type, data, metadata) VALUES ($1, $2, $3, $4, $5::text::json, $6::text::json)`,
		m.Aggregate, m.Version, aggregate.DefaultID(m.Aggregate, m.Version), m.Type, string(m.Data), nullable(m.Metadata))
	return unrepresentable(err)
}

// unrepresentable turns the refusal of a value by PostgreSQL into
// sourcetest.ErrUnrepresentable.
func unrepresentable(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code[:2] == "22" || pgErr.Code[:2] == "23") {
		return fmt.Errorf("%s: %w", pgErr.Message, sourcetest.ErrUnrepresentable)
	}
	if err != nil && errors.Is(err, errInvalidText) {
		return fmt.Errorf("%w", sourcetest.ErrUnrepresentable)
	}
	return err
}

var errInvalidText = errors.New("invalid text")

func nullable(b []byte) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}

// outboxTable maps the outbox table of newOutboxCase.
var outboxTable = pgtable.Table{Name: "outbox", Seq: "id", TxID: "txid", ID: "event_id", Aggregate: "aggregate_id",
	Version: "aggregate_version", Type: "event_type", Data: "payload", Metadata: "-", Time: "created_at"}

// newOutboxCase is a schema with inorder's tables and an application's
// outbox: text payloads, no constraint on versions, rows stored as they
// come (copies too).
func newOutboxCase(t *testing.T) *sourcetest.Case {
	db := pgtest.NewMigrated(t)
	_, err := db.Pool.Exec(t.Context(), `CREATE TABLE outbox (
	id                bigserial PRIMARY KEY,
	txid              xid8 NOT NULL DEFAULT pg_current_xact_id(),
	event_id          text,
	aggregate_id      text,
	aggregate_version integer,
	event_type        text,
	payload           text,
	created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ON outbox ((mod(hashtext(aggregate_id) & 2147483647, 4)), txid, id);`)
	if err != nil {
		t.Fatal(err)
	}
	insert := func(ctx context.Context, q interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}, m sourcetest.Message) error {
		_, err := q.Exec(ctx, `INSERT INTO outbox (event_id, aggregate_id, aggregate_version, event_type, payload) VALUES ($1, $2, $3, $4, $5)`,
			aggregate.DefaultID(m.Aggregate, m.Version), m.Aggregate, m.Version, m.Type, string(m.Data))
		return unrepresentable(err)
	}
	return &sourcetest.Case{
		Env: map[string]string{"url": db.URL, "schema": db.Schema},
		Publish: func(ctx context.Context, msgs []sourcetest.Message) error {
			for _, m := range msgs {
				if err := insert(ctx, db.Pool, m); err != nil {
					return err
				}
			}
			return nil
		},
		Hold: func(ctx context.Context, msgs []sourcetest.Message) (func(context.Context) error, error) {
			tx, err := db.Pool.BeginTx(ctx, pgx.TxOptions{})
			if err != nil {
				return nil, err
			}
			for _, m := range msgs {
				if err := insert(ctx, tx, m); err != nil {
					_ = tx.Rollback(ctx)
					return nil, err
				}
			}
			return tx.Commit, nil
		},
	}
}
