package pgtable

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inorder/inorder/aggregate"
)

// ErrVersionConflict is wrapped by the *VersionConflictError Append returns
// when a version is taken by another event or does not follow the
// aggregate's last one.
var ErrVersionConflict = errors.New("pgtable: version conflict")

// VersionConflictError reports an append that does not continue an
// aggregate's stream: Version is taken by another event, or the stream
// stands at Current and Version is not Current+1.
type VersionConflictError struct {
	Aggregate string
	Version   int64
	// Current is the aggregate's last version in the table (0: none), when
	// known.
	Current int64
}

// Error implements error.
func (e *VersionConflictError) Error() string {
	return fmt.Sprintf("pgtable: %s v%d does not continue its stream (at version %d)", e.Aggregate, e.Version, e.Current)
}

// Unwrap returns ErrVersionConflict.
func (e *VersionConflictError) Unwrap() error { return ErrVersionConflict }

// DB is what Append writes with: a pgx.Tx (to append in the transaction of
// the application's own writes, the outbox pattern), a *pgxpool.Pool or a
// *pgx.Conn.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Writer appends to inorder's own events table (migration 008) in a
// schema.
type Writer struct {
	table  string
	limits aggregate.Limits
}

// NewWriter returns a Writer to the events table of schema, validating
// events with limits (nil: aggregate's defaults).
func NewWriter(schema string, limits *aggregate.Limits) *Writer {
	w := &Writer{table: pgx.Identifier{schema, "events"}.Sanitize()}
	if limits != nil {
		w.limits = *limits
	}
	return w
}

// Append appends events, in order, in one statement, with optimistic
// concurrency per aggregate: each aggregate's events must be consecutive
// versions continuing its last one in the table (its first version when it
// has none). It returns a *VersionConflictError (wrapping
// ErrVersionConflict) when one does not — another writer appended that
// version first — and an *aggregate.ValidationError for an invalid event;
// nothing is written then (in a transaction, roll it back). Appending an
// event again — the same aggregate, version, id, type and data — is not a
// conflict: it is left as it is (an idempotent retry). An event without an
// ID gets "<aggregate>:<version>".
//
// Run Append in the transaction of the writes the events record, and the
// two commit together.
func (w *Writer) Append(ctx context.Context, db DB, events ...aggregate.Event) error {
	if len(events) == 0 {
		return nil
	}
	n := len(events)
	aggs, ids, types, datas, metas := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]*string, n)
	versions := make([]int64, n)
	next := map[string]int64{} // expected next version within the call
	for i, e := range events {
		if err := e.Validate(&w.limits); err != nil {
			return err
		}
		if v, ok := next[e.Aggregate]; ok && e.Version != v {
			return &VersionConflictError{Aggregate: e.Aggregate, Version: e.Version, Current: v - 1}
		}
		next[e.Aggregate] = e.Version + 1
		aggs[i], versions[i], ids[i], types[i], datas[i] = e.Aggregate, e.Version, e.StableID(), e.Type, string(e.Data)
		if len(e.Metadata) > 0 {
			m := string(e.Metadata)
			metas[i] = &m
		}
	}
	// One statement: the aggregates' current versions, the check, the
	// insert and what it left out (rows already there), in order.
	rows, err := db.Query(ctx, `WITH input AS (
	SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::json[], $6::json[]) WITH ORDINALITY
		AS u(aggregate, version, id, type, data, metadata, n)
), head AS (
	SELECT i.aggregate, min(i.version) AS first, coalesce((SELECT max(e.version) FROM `+w.table+` e WHERE e.aggregate = i.aggregate), 0) AS current
	FROM input i GROUP BY i.aggregate
), ins AS (
	INSERT INTO `+w.table+` (aggregate, version, id, type, data, metadata)
	SELECT i.aggregate, i.version, i.id, i.type, i.data, i.metadata FROM input i JOIN head h USING (aggregate)
	WHERE NOT EXISTS (SELECT 1 FROM head h2 WHERE h2.first > h2.current + 1)
	ORDER BY i.n
	ON CONFLICT (aggregate, version) DO NOTHING
	RETURNING aggregate, version
)
SELECT i.aggregate, i.version, h.current, h.first > h.current + 1 AS gap,
	(ins.version IS NULL) AS skipped,
	coalesce((SELECT e.id = i.id AND e.type = i.type AND e.data::text = i.data::text FROM `+w.table+` e
		WHERE e.aggregate = i.aggregate AND e.version = i.version), false) AS same
FROM input i JOIN head h USING (aggregate) LEFT JOIN ins USING (aggregate, version)
WHERE h.first > h.current + 1 OR ins.version IS NULL
ORDER BY h.first > h.current + 1 DESC, i.n`, aggs, versions, ids, types, datas, metas)
	if err != nil {
		return fmt.Errorf("pgtable: append: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var agg string
		var version, current int64
		var gap, skipped, same bool
		if err := rows.Scan(&agg, &version, &current, &gap, &skipped, &same); err != nil {
			return fmt.Errorf("pgtable: append: %w", err)
		}
		if gap || (skipped && !same) {
			return &VersionConflictError{Aggregate: agg, Version: version, Current: current}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgtable: append: %w", err)
	}
	return nil
}
