package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// This file holds the reads of aggregates' versions that the operator views
// and a rebuild's verification make. An inline projection's versions are
// the later of its version rows' and its own rows' (its fast path writes
// only the row), and an aggregate may have either without the other (only
// parked events: no row yet; created by a fenced owner: no version row), so
// these statements take the projection's inline table (nil when it has
// none).

// aggregatesOf returns a subquery of the aggregates of the projection whose
// gate key is the SQL expression keySQL, with t its inline table (nil if it
// has none): rows of (aggregate, version, parked, blocked). filter, if not
// empty, is a condition on an aggregate column named aggregate, applied to
// each side before an inline projection's join.
func (v *Versions) aggregatesOf(keySQL string, t *InlineRef, filter string) string {
	where := ""
	if filter != "" {
		where = " AND " + filter
	}
	rows := `SELECT aggregate, version, parked, blocked FROM ` + v.table + ` WHERE projection = ` + keySQL + where
	if t == nil {
		return `(` + rows + `)`
	}
	inline := `SELECT ` + t.Key + ` AS aggregate, ` + t.Version + ` AS version FROM ` + t.Table
	if filter != "" {
		inline = `SELECT * FROM (` + inline + `) i WHERE ` + filter
	}
	return `(SELECT coalesce(v.aggregate, i.aggregate) AS aggregate,
    greatest(coalesce(v.version, 0), coalesce(i.version, 0)) AS version,
    coalesce(v.parked, 0) AS parked, coalesce(v.blocked, false) AS blocked
  FROM (` + rows + `) v FULL JOIN (` + inline + `) i ON i.aggregate = v.aggregate)`
}

// appliedSum is the statement of the count of the aggregates of the
// projection whose gate key is the SQL expression keySQL and the sum of
// their versions, at most $2.
func (v *Versions) appliedSum(keySQL string, t *InlineRef) string {
	return `SELECT count(*), least(coalesce(sum(a.version::numeric), 0), $2::numeric)::bigint FROM ` + v.aggregatesOf(keySQL, t, "") + ` a`
}

// QueueAppliedSum queues the count of the aggregates of the projection
// whose gate key is keySQL (an SQL expression of the parameter $1) and the
// sum of their versions, at most max: one row of two bigints.
func (v *Versions) QueueAppliedSum(b *pgx.Batch, keySQL string, t *InlineRef, arg1 any, max int64) *pgx.QueuedQuery {
	return b.Queue(v.appliedSum(keySQL, t), arg1, max)
}

// AppliedSum returns the sum of the versions of the projection with gate
// key key, at most max.
func (v *Versions) AppliedSum(ctx context.Context, q querier, key string, t *InlineRef, max int64) (int64, error) {
	var n, sum int64
	err := q.QueryRow(ctx, v.appliedSum("$1", t), key, max).Scan(&n, &sum)
	return sum, err
}

// Compare counts the aggregates that the projection with gate key key (its
// inline table t) has behind, and ahead of, the one with gate key other
// (its inline table ot).
func (v *Versions) Compare(ctx context.Context, q querier, key string, t *InlineRef, other string, ot *InlineRef) (behind, ahead int64, err error) {
	err = q.QueryRow(ctx, `SELECT count(*) FILTER (WHERE coalesce(n.version, 0) < coalesce(o.version, 0)),
  count(*) FILTER (WHERE coalesce(n.version, 0) > coalesce(o.version, 0)) FROM
  `+v.aggregatesOf("$1", t, "")+` n
  FULL JOIN `+v.aggregatesOf("$2", ot, "")+` o USING (aggregate)`,
		key, other).Scan(&behind, &ahead)
	return behind, ahead, err
}

// List lists the aggregates of key by aggregate in byte order: rows of
// (aggregate, version, parked, blocked).
func (v *Versions) List(ctx context.Context, q querier, key string, t *InlineRef, p Page) (pgx.Rows, error) {
	// Each side ordered and limited before an inline projection's join: the
	// first $4 of the union are among the first $4 of each.
	filter := `($2 = '' OR aggregate = $2) AND aggregate COLLATE "C" > $3`
	if t != nil {
		filter += ` ORDER BY aggregate COLLATE "C" LIMIT $4`
	}
	return q.Query(ctx, `SELECT a.aggregate, a.version, a.parked, a.blocked FROM `+v.aggregatesOf("$1", t, filter)+` a
ORDER BY a.aggregate COLLATE "C" LIMIT $4`, key, p.Aggregate, p.After, p.Limit)
}

// VersionOf returns a query of the version of aggregate $2 in the
// projection whose gate key is keySQL (an SQL expression of $1), with t
// its inline table (nil if it has none).
func (v *Versions) VersionOf(t *InlineRef, keySQL string) string {
	sql := `SELECT version FROM ` + v.table + ` WHERE projection = ` + keySQL + ` AND aggregate = $2`
	if t == nil {
		return sql
	}
	// The later of the version row's and the projection row's, either of
	// which may be missing (an aggregate with only parked events has no
	// row yet).
	return `SELECT greatest(coalesce((` + sql + `), 0), coalesce((SELECT ` + t.Version +
		` FROM ` + t.Table + ` WHERE ` + t.Key + ` = $2), 0))`
}

// ListInlineLog lists the applied log of the inline projection with gate
// key key from its rows' logs (entries of entrySize bytes) and the applied
// table (versions that operator actions recorded), by aggregate in byte
// order and version: rows of (aggregate, version, event id, hash, whether
// the entry is the row's).
func (a *Applied) ListInlineLog(ctx context.Context, q querier, key string, t InlineRef, entrySize int, p Page) (pgx.Rows, error) {
	k, ver, lg := t.Key, t.Version, t.Log
	size := fmt.Sprint(entrySize)
	return q.Query(ctx, `WITH r AS (
  SELECT `+k+` AS aggregate, `+ver+` AS version, `+lg+` AS log FROM `+t.Table+`
  WHERE ($2 = '' OR `+k+` = $2) AND `+k+` COLLATE "C" > $3 ORDER BY `+k+` COLLATE "C" LIMIT $4)
SELECT * FROM (
SELECT r.aggregate, r.version - n + 1 AS version, NULL::text AS event_id, substring(r.log FROM octet_length(r.log) / `+size+` * `+size+` - `+size+` * n + 1 FOR `+size+`) AS hash, true AS inline
FROM r, generate_series(1, octet_length(r.log) / `+size+`) AS n
UNION ALL
SELECT a.aggregate, a.version, a.event_id, a.hash, false FROM `+a.table+` a
WHERE a.projection = $1 AND a.aggregate IN (SELECT aggregate FROM r)
  AND NOT EXISTS (SELECT 1 FROM r WHERE r.aggregate = a.aggregate AND a.version > r.version - octet_length(r.log) / `+size+` AND a.version <= r.version)) u
ORDER BY u.aggregate COLLATE "C", u.version`, key, p.Aggregate, p.After, p.Limit)
}

// QueueInlineStates queues the read, for each of aggs, of its inline row's
// version and whether the gate marks the row (its log's length not a
// multiple of entrySize), and, for those without a row, of its version
// row's version: rows of (aggregate, row version, marked, version row's
// version), NULL where there is none. An aggregate's row, if it has one,
// says all (its mark stands for its version row).
func (v *Versions) QueueInlineStates(b *pgx.Batch, key string, t InlineRef, entrySize int, aggs []string) *pgx.QueuedQuery {
	return b.Queue(`SELECT k.aggregate, t.version, t.marked, v.version FROM unnest($2::text[]) AS k(aggregate)
LEFT JOIN LATERAL (SELECT `+t.Version+` AS version, octet_length(`+t.Log+`) % `+strconv.Itoa(entrySize)+` <> 0 AS marked FROM `+t.Table+`
  WHERE `+t.Key+` = k.aggregate OFFSET 0) t ON true
LEFT JOIN LATERAL (SELECT version FROM `+v.table+`
  WHERE t.version IS NULL AND projection = $1 AND aggregate = k.aggregate OFFSET 0) v ON true`, key, aggs)
}
