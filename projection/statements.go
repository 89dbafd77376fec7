package projection

import (
	"strconv"

	"github.com/jackc/pgx/v5"
)

// statements are the processor's SQL, with the schema's tables qualified.
type statements struct {
	pauseShared, pauseExclusive, pauseRelease string

	readVersions, lockVersions, lockOne   string
	casVersions, setVersion, resetVersion string
	specVersions                          string
	markVersions                          string
	loadAppliedTable                      string
	loadApplied, insertApplied            string
	spillLog, trimLog, spillAll           string
	loadQuarantineRefs, loadQuarantine    string
	upsertQuarantine, deleteQuarantine    string
	upsertConflicts, upsertRejected       string
}

func newStatements(schema string) statements {
	t := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	versions, applied, quarantine := t("versions"), t("applied"), t("quarantine")
	// appendLog is the SET clause that appends EXCLUDED's log entries to a
	// version row's log.
	appendLog := `log_ids = v.log_ids || EXCLUDED.log_ids, log_hashes = v.log_hashes || EXCLUDED.log_hashes`
	// logIDs turns a run's ids, given as an array literal or NULL when
	// every id is the default one, into the log_ids of n entries.
	logIDs := func(ids, n string) string {
		return `CASE WHEN ` + ids + ` IS NULL THEN array_fill(NULL::text, ARRAY[` + n + `]) ELSE ` + ids + `::text[] END`
	}
	// pageStart is the log_base a row keeps once its full pages moved to
	// applied (appliedlog.go's pageStart: SQL and Go divide towards zero).
	page := strconv.Itoa(logPage)
	pageStart := `greatest((v.version - 1) / ` + page + ` * ` + page + `, 0)`
	return statements{
		pauseShared:    `SELECT pg_advisory_xact_lock_shared($1)`,
		pauseExclusive: `SELECT pg_advisory_lock($1)`,
		pauseRelease:   `SELECT pg_advisory_unlock($1)`,

		// Version rows are probed one aggregate at a time: "aggregate =
		// ANY($2)" on the key's second column makes Postgres 15 scan the
		// projection's rows instead. OFFSET 0 keeps the probes from being
		// flattened into a join.
		readVersions: `SELECT k.aggregate, v.version, v.parked, v.blocked, v.rev
FROM unnest($2::text[]) AS k(aggregate)
CROSS JOIN LATERAL (SELECT version, parked, blocked, rev FROM ` + versions + `
  WHERE projection = $1 AND aggregate = k.aggregate OFFSET 0) v`,
		// lockVersions creates the missing rows and locks every row, in one
		// statement whose rows come in the order of $2, which the processor
		// sorts: the global lock order (see txMode). An update that changes
		// nothing is what locks an existing row here: a read FOR UPDATE and
		// an insert of the missing rows would be two statements, taking
		// their locks in two passes, out of order.
		lockVersions: `INSERT INTO ` + versions + ` AS v (projection, aggregate)
SELECT $1, k.aggregate FROM unnest($2::text[]) AS k(aggregate)
ON CONFLICT (projection, aggregate) DO UPDATE SET rev = v.rev
RETURNING v.aggregate, v.version, v.parked, v.blocked, v.rev`,
		lockOne: `SELECT version, parked, blocked FROM ` + versions + `
WHERE projection = $1 AND aggregate = $2 FOR UPDATE`,
		// casVersions writes the new states of aggregates whose rev is still
		// the one read (rev = new rev - 1); a missing row is inserted. Rows
		// come sorted by aggregate, so concurrent writers lock in one order.
		// A row that does not match stays locked all the same (ON CONFLICT
		// DO UPDATE locks the row before it checks WHERE). It also appends
		// the applied-log entries of the planned runs: $7 holds each row's
		// entry count, $8 its ids (see logIDs), $9 its hashes, 16 bytes
		// each, concatenated.
		casVersions: `INSERT INTO ` + versions + ` AS v (projection, aggregate, version, parked, blocked, rev, log_ids, log_hashes)
SELECT $1, k.aggregate, k.version, k.parked, k.blocked, k.rev, ` + logIDs("k.ids", "k.n") + `, k.hashes
FROM unnest($2::text[], $3::bigint[], $4::int[], $5::bool[], $6::bigint[], $7::int[], $8::text[], $9::bytea[])
  AS k(aggregate, version, parked, blocked, rev, n, ids, hashes)
ON CONFLICT (projection, aggregate) DO UPDATE
SET version = EXCLUDED.version, parked = EXCLUDED.parked, blocked = EXCLUDED.blocked,
    rev = EXCLUDED.rev, updated_at = now(),
    ` + appendLog + `
WHERE v.rev = EXCLUDED.rev - 1`,
		// specVersions writes the versions of a batch that is assumed to
		// continue every aggregate where it stands (see txMode.speculative),
		// without reading the rows first: a row moves from the expected
		// version to the run's last one only if nothing is parked or
		// quarantined. The expected version rides in the inserted rev: 1 for
		// a new aggregate (expected version 0), minus the expected version
		// otherwise. It returns how many rows were written as assumed: one
		// short — a row not at the expected version, or changed concurrently
		// (ON CONFLICT DO UPDATE checks the latest committed row), or
		// inserted where one was expected to exist (a negative rev) — and
		// the assumption was wrong: the transaction rolls back. It is one INSERT rather than
		// an UPDATE joined with the arrays because the planner, without
		// statistics on a young table, joins that by scanning the table once
		// per row.
		// The runs' applied-log entries are appended as in casVersions ($5
		// ids, $6 hashes; a run has version - expected entries). Rows come
		// sorted by aggregate, as everywhere.
		specVersions: `WITH w AS (INSERT INTO ` + versions + ` AS v (projection, aggregate, version, rev, log_ids, log_hashes)
SELECT $1, k.aggregate, k.version, CASE WHEN k.expected = 0 THEN 1 ELSE -k.expected END,
  ` + logIDs("k.ids", "(k.version - k.expected)::int") + `, k.hashes
FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::bytea[]) AS k(aggregate, expected, version, ids, hashes)
ON CONFLICT (projection, aggregate) DO UPDATE
SET version = EXCLUDED.version, rev = v.rev + 1, updated_at = now(),
    ` + appendLog + `
WHERE v.version = CASE WHEN EXCLUDED.rev > 0 THEN 0 ELSE -EXCLUDED.rev END AND v.parked = 0 AND NOT v.blocked
RETURNING v.rev)
SELECT count(*) FILTER (WHERE rev > 0) FROM w`,
		// markVersions inserts the empty version rows of the aggregates of
		// an inline projection's fast path that start at version 1, and
		// returns how many it inserted (see inline_gate.go).
		markVersions: `WITH w AS (INSERT INTO ` + versions + ` (projection, aggregate)
SELECT $1, k.aggregate FROM unnest($2::text[]) AS k(aggregate)
ON CONFLICT (projection, aggregate) DO NOTHING RETURNING 1)
SELECT count(*) FROM w`,
		// setVersion overwrites the state of a row this transaction holds,
		// dropping the last $6 entries of its log: those of a run that
		// casVersions planned and a careful attempt cut short (before the
		// log's full pages move out).
		setVersion: `UPDATE ` + versions + `
SET version = $3, parked = $4, blocked = $5, rev = rev + 1, updated_at = now(),
    log_ids = log_ids[1:cardinality(log_ids) - $6],
    log_hashes = substring(log_hashes FOR octet_length(log_hashes) - 16 * $6)
WHERE projection = $1 AND aggregate = $2`,
		// resetVersion writes an operator's decision about one held row; its
		// log starts again, empty, at the new version (spillAll moved the
		// old one's entries to applied, where the operator's own entries
		// go).
		resetVersion: `UPDATE ` + versions + `
SET version = $3, parked = $4, blocked = $5, rev = rev + 1, updated_at = now(),
    log_base = $3, log_ids = '{}', log_hashes = ''
WHERE projection = $1 AND aggregate = $2`,

		// spillLog moves the entries of the full pages of the logs of the
		// rows of $2 — rows the transaction holds, past the end of a page
		// since their log began — into applied; trimLog then drops them from
		// the rows. An entry already in applied is left alone.
		spillLog: `INSERT INTO ` + applied + ` (projection, aggregate, version, event_id, hash)
SELECT $1, k.aggregate, v.log_base + n,
       coalesce(v.log_ids[n], k.aggregate || ':' || (v.log_base + n)),
       substring(v.log_hashes FROM 16 * (n - 1) + 1 FOR 16)
FROM unnest($2::text[]) AS k(aggregate)
CROSS JOIN LATERAL (SELECT log_base, log_ids, log_hashes, ` + pageStart + ` AS keep FROM ` + versions + ` v
  WHERE projection = $1 AND aggregate = k.aggregate OFFSET 0) v
CROSS JOIN LATERAL generate_series(1, (v.keep - v.log_base)::int) AS n
ON CONFLICT DO NOTHING`,
		// trimLog: see spillLog. The rows are found one by one (OFFSET 0)
		// and updated by ctid: an UPDATE joined with the array risks a scan
		// per row.
		trimLog: `UPDATE ` + versions + ` AS v
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

		// loadApplied probes the applied log once per (aggregate, version):
		// the version row's page, then the applied table; OFFSET 0 keeps the
		// planner from turning the probes into a scan.
		loadApplied: `SELECT k.aggregate, k.version, a.event_id, a.hash
FROM unnest($2::text[], $3::bigint[]) AS k(aggregate, version)
CROSS JOIN LATERAL (
  (SELECT coalesce(v.log_ids[(k.version - v.log_base)::int], k.aggregate || ':' || k.version) AS event_id,
          substring(v.log_hashes FROM (16 * (k.version - v.log_base - 1) + 1)::int FOR 16) AS hash
   FROM ` + versions + ` v
   WHERE v.projection = $1 AND v.aggregate = k.aggregate AND k.version > v.log_base AND k.version <= v.version OFFSET 0)
  UNION ALL
  (SELECT event_id, hash FROM ` + applied + `
   WHERE projection = $1 AND aggregate = k.aggregate AND version = k.version OFFSET 0)) a`,
		// loadAppliedTable is loadApplied without the version rows' logs:
		// inline projections keep theirs in their own rows.
		loadAppliedTable: `SELECT k.aggregate, k.version, a.event_id, a.hash
FROM unnest($2::text[], $3::bigint[]) AS k(aggregate, version)
CROSS JOIN LATERAL (SELECT event_id, hash FROM ` + applied + `
   WHERE projection = $1 AND aggregate = k.aggregate AND version = k.version OFFSET 0) a`,
		insertApplied: `INSERT INTO ` + applied + ` (projection, aggregate, version, event_id, hash)
SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::text[], $5::bytea[])`,

		loadQuarantineRefs: `SELECT k.aggregate, q.version, q.event_id, q.hash
FROM unnest($2::text[]) AS k(aggregate)
CROSS JOIN LATERAL (SELECT version, event_id, hash FROM ` + quarantine + `
  WHERE projection = $1 AND aggregate = k.aggregate OFFSET 0) q`,
		loadQuarantine: `SELECT version, event_id, hash, type, data, metadata FROM ` + quarantine + `
WHERE projection = $1 AND aggregate = $2`,
		upsertQuarantine: `INSERT INTO ` + quarantine + ` AS q
  (projection, aggregate, version, event_id, hash, type, data, metadata, error, attempts)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (projection, aggregate) DO UPDATE
SET version = EXCLUDED.version, event_id = EXCLUDED.event_id, hash = EXCLUDED.hash, type = EXCLUDED.type,
    data = EXCLUDED.data, metadata = EXCLUDED.metadata, error = EXCLUDED.error,
    attempts = q.attempts + EXCLUDED.attempts, last_attempt_at = now()`,
		deleteQuarantine: `DELETE FROM ` + quarantine + ` WHERE projection = $1 AND aggregate = $2`,

		upsertConflicts: `INSERT INTO ` + t("conflicts") + ` AS c
  (projection, aggregate, version, existing_state, existing_event_id, existing_hash,
   incoming_event_id, incoming_hash, type, data, metadata, count)
SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::text[], $5::text[], $6::bytea[],
  $7::text[], $8::bytea[], $9::text[], $10::bytea[], $11::bytea[], $12::bigint[])
ON CONFLICT (projection, aggregate, version, incoming_event_id, incoming_hash) DO UPDATE
SET count = c.count + EXCLUDED.count, last_seen = now()`,
		upsertRejected: `INSERT INTO ` + t("rejected") + ` AS r
  (fingerprint, source, event_id, aggregate, version, type, data, metadata, reason, error, count,
   raw_event_id, raw_aggregate, raw_type, content_type)
SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[],
  $7::bytea[], $8::bytea[], $9::text[], $10::text[], $11::bigint[], $12::bytea[], $13::bytea[], $14::bytea[], $15::text[])
ON CONFLICT (fingerprint) DO UPDATE SET count = r.count + EXCLUDED.count, last_seen = now()`,
	}
}
