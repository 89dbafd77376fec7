package store

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// This file holds the statements with which a side-by-side rebuild hands a
// new generation's aggregates to the gate: the version rows and applied log
// its replay wrote elsewhere (its journal, an unlogged table of the
// replay's own, or an inline projection's rows), written once per
// aggregate.

// InlineRef names an inline projection's table and columns, each
// identifier already quoted (pgx.Identifier.Sanitize): Table the table,
// Key, Version and Log its aggregate id, version and log columns.
type InlineRef struct {
	Table, Key, Version, Log string
}

// Gated reads, for each of aggs, last — a scalar subquery of the
// aggregate's last version, aggregate k.a — and whether the gate has a
// version row of it: rows of (aggregate, last version, gated).
func (v *Versions) Gated(ctx context.Context, q querier, key string, aggs []string, last string) (pgx.Rows, error) {
	return q.Query(ctx, `SELECT k.a,
  coalesce((`+last+`), 0),
  EXISTS (SELECT 1 FROM `+v.table+` v WHERE v.projection = $1 AND v.aggregate = k.a)
FROM unnest($2::text[]) AS k(a)`, key, aggs)
}

// QueueSeed queues the insertion of the version rows of aggs (aggs[i] at
// versions[i], an empty log from there) that do not exist.
func (v *Versions) QueueSeed(b *pgx.Batch, key string, aggs []string, versions []int64) *pgx.QueuedQuery {
	return b.Queue(`INSERT INTO `+v.table+` (projection, aggregate, version, log_base)
SELECT $1, k.a, k.v, k.v FROM unnest($2::text[], $3::bigint[]) AS k(a, v) ORDER BY k.a COLLATE "C"
ON CONFLICT (projection, aggregate) DO NOTHING`, key, aggs, versions)
}

// SeedInline writes a version row per row of the inline table t, at the
// row's version, with an empty log, where none exists.
func (v *Versions) SeedInline(ctx context.Context, q querier, key string, t InlineRef) error {
	_, err := q.Exec(ctx, `INSERT INTO `+v.table+` (projection, aggregate, version, log_base)
SELECT $1, `+t.Key+`, `+t.Version+`, `+t.Version+` FROM `+t.Table+`
ON CONFLICT (projection, aggregate) DO NOTHING`, key)
	return err
}

// QueueFromJournal queues the insertion into the applied table of the
// entries of aggs in journal (the quoted name of a table of (aggregate,
// version, event_id, hash)), where none exists.
func (a *Applied) QueueFromJournal(b *pgx.Batch, key, journal string, aggs []string) *pgx.QueuedQuery {
	return b.Queue(`INSERT INTO `+a.table+` (projection, aggregate, version, event_id, hash)
SELECT $1, j.aggregate, j.version, coalesce(j.event_id, j.aggregate || ':' || j.version), j.hash
FROM `+journal+` j WHERE j.aggregate = ANY($2)
ON CONFLICT DO NOTHING`, key, aggs)
}

// SeedFromJournal writes, from journal (as QueueFromJournal's), the
// version row of every aggregate in it that has none — its last version,
// and its log's current page — and the applied log of the earlier pages.
// One sort of the journal does both.
func (s *Store) SeedFromJournal(ctx context.Context, q querier, key, journal string) error {
	page := strconv.Itoa(LogPage)
	base := `greatest((last - 1) / ` + page + ` * ` + page + `, 0)`
	sql := `WITH s AS MATERIALIZED (
  SELECT aggregate, version, event_id, hash, max(version) OVER (PARTITION BY aggregate) AS last FROM ` + journal + `),
a AS (
  INSERT INTO ` + s.Applied.table + ` (projection, aggregate, version, event_id, hash)
  SELECT $1, aggregate, version, coalesce(event_id, aggregate || ':' || version), hash FROM s WHERE version <= ` + base + `
  ON CONFLICT DO NOTHING)
INSERT INTO ` + s.Versions.table + ` (projection, aggregate, version, log_base, log_ids, log_hashes)
SELECT $1, aggregate, last, ` + base + `,
  coalesce(array_agg(event_id ORDER BY version) FILTER (WHERE version > ` + base + `), '{}'),
  coalesce(string_agg(hash, ''::bytea ORDER BY version) FILTER (WHERE version > ` + base + `), ''::bytea)
FROM s GROUP BY aggregate, last
ON CONFLICT (projection, aggregate) DO NOTHING`
	_, err := q.Exec(ctx, sql, key)
	return err
}
