package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// notes is the browser tests' projection: each aggregate's read model is
// its last event's body. While failing is set it refuses the events whose
// body contains "fail" (the fault an operator fixes before a retry); while
// hold is set it waits before each event (a slow handler: the source lags);
// delay slows every event down (a rebuild to watch).
type notes struct {
	failing atomic.Bool
	hold    atomic.Bool
	delay   atomic.Int64 // nanoseconds
	applied atomic.Int64
}

type noteData struct {
	Body string `json:"body"`
}

func (*notes) Name() string { return "notes" }

func (*notes) Setup(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS notes (aggregate text PRIMARY KEY, version bigint NOT NULL, body text NOT NULL)`)
	return err
}

func (*notes) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `DELETE FROM notes`)
	return err
}

func (n *notes) Apply(ctx context.Context, tx *projection.Tx, e aggregate.Event) error {
	for n.hold.Load() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	if d := time.Duration(n.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	var d noteData
	if err := json.Unmarshal(e.Data, &d); err != nil {
		return err
	}
	if n.failing.Load() && strings.Contains(d.Body, "fail") {
		return fmt.Errorf("notes: refusing a note of %d bytes", len(d.Body))
	}
	tx.Queue(`INSERT INTO notes (aggregate, version, body) VALUES ($1, $2, $3)
ON CONFLICT (aggregate) DO UPDATE SET version = excluded.version, body = excluded.body`, e.Aggregate, e.Version, d.Body)
	n.applied.Add(1)
	return nil
}

// note is a read model.
type note struct {
	Version int64  `json:"version"`
	Body    string `json:"body"`
}

func (*notes) Get(ctx context.Context, q projection.Querier, agg string) (any, bool, error) {
	var v note
	err := q.QueryRow(ctx, `SELECT version, body FROM notes WHERE aggregate = $1`, agg).Scan(&v.Version, &v.Body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	return v, err == nil, err
}

func (*notes) List(ctx context.Context, q projection.Querier, opts projection.ListQuery) ([]any, string, error) {
	if len(opts.Filters) > 0 {
		return nil, "", projection.ErrUnknownFilter
	}
	rows, err := q.Query(ctx, `SELECT aggregate, version, body FROM notes WHERE aggregate COLLATE "C" > $1 ORDER BY aggregate COLLATE "C" LIMIT $2`,
		opts.After, opts.PageSize())
	if err != nil {
		return nil, "", err
	}
	var out []any
	var last string
	for rows.Next() {
		var v note
		if err := rows.Scan(&last, &v.Version, &v.Body); err != nil {
			return nil, "", err
		}
		out = append(out, v)
	}
	next := ""
	if len(out) == opts.PageSize() {
		next = last
	}
	return out, next, rows.Err()
}

func (*notes) Filters() []string { return nil }
