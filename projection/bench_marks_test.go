package projection_test

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// This file holds the bound of a design the gate does not have: a fenced
// owner (issue 28, item 1) that keeps each aggregate's state in memory and
// marks each batch as a whole — one row per batch with the versions and
// log entries of its aggregates — instead of writing a version row per
// aggregate per batch. The marks must be folded into per-aggregate rows
// eventually (when ownership moves, when the memory evicts, for readers),
// and the fold writes a row per aggregate again, once per aggregate per
// fold rather than per batch. benchMarks measures that: the mark per batch
// in the handler's pipeline, and a fold every foldEvery batches (0: once,
// at the end of the run, inside the timed run — an owner handing over).
// Nothing is read, locked or checked: a bound, correct only for in-order,
// partitioned delivery.

// benchMarksDDL creates the marks and the version rows they fold into (the
// shape of inorder's versions table, with the applied log's hashes).
const benchMarksDDL = `CREATE TABLE floor_marks (seq bigserial PRIMARY KEY, projection text NOT NULL,
  aggs text[] NOT NULL, versions bigint[] NOT NULL, logs bytea[] NOT NULL);
CREATE TABLE floor_mark_versions (projection text, aggregate text, version bigint NOT NULL DEFAULT 0,
  log bytea NOT NULL DEFAULT '', updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (projection, aggregate))`

// benchMarks is the state of one run of the marks bound.
type benchMarks struct {
	projection string
	foldEvery  int64
	batches    atomic.Int64
}

// queue queues the mark of events (sorted by aggregate and version) on t.
func (m *benchMarks) queue(t *projection.Tx, events []aggregate.Event) {
	aggs, vers, logs := benchLogEntries(events)
	t.Queue(`INSERT INTO floor_marks (projection, aggs, versions, logs) VALUES ($1, $2, $3, $4)`, m.projection, aggs, vers, logs)
}

// benchLogEntries returns, for events sorted by aggregate and version, each
// aggregate, its last version and its versions' applied-log entries (the
// first 16 bytes of each event's hash, concatenated), as the bounds that
// keep the gate's log write them.
func benchLogEntries(events []aggregate.Event) (aggs []string, vers []int64, logs [][]byte) {
	for i, e := range events {
		if i == 0 || events[i-1].Aggregate != e.Aggregate {
			aggs, vers, logs = append(aggs, e.Aggregate), append(vers, 0), append(logs, nil)
		}
		h := e.Hash()
		vers[len(vers)-1], logs[len(logs)-1] = e.Version, append(logs[len(logs)-1], h[:16]...)
	}
	return aggs, vers, logs
}

// committed counts a committed batch and folds when one is due.
func (m *benchMarks) committed(ctx context.Context, pool *pgxpool.Pool) error {
	if n := m.batches.Add(1); m.foldEvery > 0 && n%m.foldEvery == 0 {
		return m.fold(ctx, pool)
	}
	return nil
}

// fold moves every committed mark into the version rows, in one
// transaction, rows in aggregate order.
func (m *benchMarks) fold(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// One fold at a time: a mark's versions must not be folded after a
		// later one's.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(2028)`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `WITH m AS (DELETE FROM floor_marks WHERE projection = $1 RETURNING seq, aggs, versions, logs),
e AS (SELECT u.agg, u.version, u.log, m.seq FROM m CROSS JOIN LATERAL unnest(m.aggs, m.versions, m.logs) AS u(agg, version, log)),
f AS (SELECT agg, max(version) AS version, string_agg(log, ''::bytea ORDER BY seq) AS log FROM e GROUP BY agg)
INSERT INTO floor_mark_versions AS v (projection, aggregate, version, log)
SELECT $1, agg, version, log FROM f ORDER BY agg
ON CONFLICT (projection, aggregate) DO UPDATE SET version = EXCLUDED.version, log = v.log || EXCLUDED.log, updated_at = now()`, m.projection)
		return err
	})
}
