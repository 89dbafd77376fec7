package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Applied is the applied table — the applied log's entries (event id and
// payload hash per projection, aggregate and version) that left their
// version row's current page, and operators' entries — with the moves of
// full pages out of the version rows' logs into it. The applied_log view
// shows both.
type Applied struct {
	table                 string // qualified
	spill, trim, spillAll string
	load, loadTable       string
	insert                string
	listLog               string
}

func newApplied(t qualify) Applied {
	versions, applied := t("versions"), t("applied")
	return Applied{
		table: applied,
		// spill moves the entries of the full pages of the logs of the
		// rows of $2 — rows the transaction holds, past the end of a page
		// since their log began — into applied; trim then drops them from
		// the rows. An entry already in applied is left alone.
		spill: `INSERT INTO ` + applied + ` (projection, aggregate, version, event_id, hash)
SELECT $1, k.aggregate, v.log_base + n,
       coalesce(v.log_ids[n], k.aggregate || ':' || (v.log_base + n)),
       substring(v.log_hashes FROM 16 * (n - 1) + 1 FOR 16)
FROM unnest($2::text[]) AS k(aggregate)
CROSS JOIN LATERAL (SELECT log_base, log_ids, log_hashes, ` + pageStart + ` AS keep FROM ` + versions + ` v
  WHERE projection = $1 AND aggregate = k.aggregate OFFSET 0) v
CROSS JOIN LATERAL generate_series(1, (v.keep - v.log_base)::int) AS n
ON CONFLICT DO NOTHING`,
		// trim: see spill. The rows are found one by one (OFFSET 0) and
		// updated by ctid: an UPDATE joined with the array risks a scan per
		// row.
		trim: `UPDATE ` + versions + ` AS v
SET log_base = ` + pageStart + `,
    log_ids = v.log_ids[(` + pageStart + ` - v.log_base + 1)::int:],
    log_hashes = substring(v.log_hashes FROM (16 * (` + pageStart + ` - v.log_base) + 1)::int)
WHERE v.ctid = ANY(ARRAY(SELECT r.ctid FROM unnest($2::text[]) AS k(aggregate)
  CROSS JOIN LATERAL (SELECT ctid FROM ` + versions + ` WHERE projection = $1 AND aggregate = k.aggregate OFFSET 0) r))
  AND ` + pageStart + ` > v.log_base`,
		// spillAll moves a held row's whole log into applied, before an
		// operator's action starts a new one.
		spillAll: `INSERT INTO ` + applied + ` (projection, aggregate, version, event_id, hash)
SELECT $1, $2, v.log_base + n, coalesce(v.log_ids[n], $2 || ':' || (v.log_base + n)),
       substring(v.log_hashes FROM 16 * (n - 1) + 1 FOR 16)
FROM ` + versions + ` v, generate_series(1, cardinality(v.log_ids)) AS n
WHERE v.projection = $1 AND v.aggregate = $2
ON CONFLICT DO NOTHING`,
		// load probes the applied log once per (aggregate, version): the
		// version row's page, then the applied table; OFFSET 0 keeps the
		// planner from turning the probes into a scan.
		load: `SELECT k.aggregate, k.version, a.event_id, a.hash
FROM unnest($2::text[], $3::bigint[]) AS k(aggregate, version)
CROSS JOIN LATERAL (
  (SELECT coalesce(v.log_ids[(k.version - v.log_base)::int], k.aggregate || ':' || k.version) AS event_id,
          substring(v.log_hashes FROM (16 * (k.version - v.log_base - 1) + 1)::int FOR 16) AS hash
   FROM ` + versions + ` v
   WHERE v.projection = $1 AND v.aggregate = k.aggregate AND k.version > v.log_base AND k.version <= v.version OFFSET 0)
  UNION ALL
  (SELECT event_id, hash FROM ` + applied + `
   WHERE projection = $1 AND aggregate = k.aggregate AND version = k.version OFFSET 0)) a`,
		// loadTable is load without the version rows' logs: inline
		// projections keep theirs in their own rows.
		loadTable: `SELECT k.aggregate, k.version, a.event_id, a.hash
FROM unnest($2::text[], $3::bigint[]) AS k(aggregate, version)
CROSS JOIN LATERAL (SELECT event_id, hash FROM ` + applied + `
   WHERE projection = $1 AND aggregate = k.aggregate AND version = k.version OFFSET 0) a`,
		insert: `INSERT INTO ` + applied + ` (projection, aggregate, version, event_id, hash)
SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::text[], $5::bytea[])`,
		listLog: `SELECT aggregate, version, event_id, hash FROM ` + t("applied_log") + `
WHERE projection = $1 AND ($2 = '' OR aggregate = $2) AND aggregate COLLATE "C" > $3
ORDER BY aggregate COLLATE "C", version LIMIT $4`,
	}
}

// QueueSpill queues the move of the full pages of the logs of the version
// rows of aggs, which the transaction holds, into the applied table, and
// their removal from the rows.
func (a *Applied) QueueSpill(b *pgx.Batch, key string, aggs []string) {
	b.Queue(a.spill, key, aggs)
	b.Queue(a.trim, key, aggs)
}

// QueueSpillAll queues the move of the whole log of agg's version row,
// which the transaction holds, into the applied table.
func (a *Applied) QueueSpillAll(b *pgx.Batch, key, agg string) *pgx.QueuedQuery {
	return b.Queue(a.spillAll, key, agg)
}

// QueueLoad queues the read of the applied-log entries of (aggs[i],
// versions[i]): rows of (aggregate, version, event id, hash). inRows reads
// the version rows' logs too; without it, the applied table alone (an
// inline projection keeps its log in its own rows).
func (a *Applied) QueueLoad(b *pgx.Batch, key string, aggs []string, versions []int64, inRows bool) *pgx.QueuedQuery {
	if inRows {
		return b.Queue(a.load, key, aggs, versions)
	}
	return b.Queue(a.loadTable, key, aggs, versions)
}

// QueueInsert queues the insertion of the entries (aggs[i], versions[i],
// ids[i], hashes[i]).
func (a *Applied) QueueInsert(b *pgx.Batch, key string, aggs []string, versions []int64, ids []string, hashes [][]byte) *pgx.QueuedQuery {
	return b.Queue(a.insert, key, aggs, versions, ids, hashes)
}

// ListLog lists the applied log (the applied_log view: the version rows'
// pages and the applied table) of key by aggregate in byte order and
// version: rows of (aggregate, version, event id, hash).
func (a *Applied) ListLog(ctx context.Context, q querier, key string, p Page) (pgx.Rows, error) {
	return q.Query(ctx, a.listLog, key, p.Aggregate, p.After, p.Limit)
}
