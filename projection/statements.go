package projection

import "github.com/jackc/pgx/v5"

// statements are the processor's SQL, with the schema's tables qualified.
type statements struct {
	pauseShared, pauseExclusive, pauseRelease string

	insertVersions, readVersions, lockVersions, lockOne string
	casVersions, setVersions                            string
	specVersions                                        string
	loadApplied, insertApplied                          string
	loadQuarantineRefs, loadQuarantine                  string
	upsertQuarantine, deleteQuarantine                  string
	upsertConflicts, upsertRejected                     string
	operatorLog                                         string
}

func newStatements(schema string) statements {
	t := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	versions, applied, quarantine := t("versions"), t("applied"), t("quarantine")
	return statements{
		pauseShared:    `SELECT pg_advisory_xact_lock_shared($1)`,
		pauseExclusive: `SELECT pg_advisory_lock($1)`,
		pauseRelease:   `SELECT pg_advisory_unlock($1)`,

		insertVersions: `INSERT INTO ` + versions + ` (projection, aggregate)
SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING`,
		// Version rows are probed one aggregate at a time: "aggregate =
		// ANY($2)" on the key's second column makes Postgres 15 scan the
		// projection's rows instead. OFFSET 0 keeps the probes from being
		// flattened into a join; the locks are taken in array order, which
		// the processor sorts.
		readVersions: `SELECT k.aggregate, v.version, v.parked, v.blocked, v.rev
FROM unnest($2::text[]) AS k(aggregate)
CROSS JOIN LATERAL (SELECT version, parked, blocked, rev FROM ` + versions + `
  WHERE projection = $1 AND aggregate = k.aggregate OFFSET 0) v`,
		lockVersions: `SELECT k.aggregate, v.version, v.parked, v.blocked, v.rev
FROM unnest($2::text[]) AS k(aggregate)
CROSS JOIN LATERAL (SELECT version, parked, blocked, rev FROM ` + versions + `
  WHERE projection = $1 AND aggregate = k.aggregate OFFSET 0 FOR UPDATE) v`,
		lockOne: `SELECT version, parked, blocked FROM ` + versions + `
WHERE projection = $1 AND aggregate = $2 FOR UPDATE`,
		// casVersions writes the new states of aggregates whose rev is still
		// the one read (rev = new rev - 1); a missing row is inserted. Rows
		// come sorted by aggregate, so concurrent writers lock in one order.
		casVersions: `INSERT INTO ` + versions + ` AS v (projection, aggregate, version, parked, blocked, rev)
SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::int[], $5::bool[], $6::bigint[])
ON CONFLICT (projection, aggregate) DO UPDATE
SET version = EXCLUDED.version, parked = EXCLUDED.parked, blocked = EXCLUDED.blocked,
    rev = EXCLUDED.rev, updated_at = now()
WHERE v.rev = EXCLUDED.rev - 1`,
		// specVersions writes the versions of a batch that is assumed to
		// continue every aggregate where it stands (see txMode.speculative),
		// without reading the rows first: a row moves from the expected
		// version to the run's last one only if nothing is parked or
		// quarantined. The expected version rides in the inserted rev: 1 for
		// a new aggregate (expected version 0), minus the expected version
		// otherwise. The caller checks what comes back: a row short (not at
		// the expected version, or changed concurrently: ON CONFLICT DO
		// UPDATE checks the latest committed row), or a row with a negative
		// rev (inserted where one was expected to exist), and the assumption
		// was wrong: the transaction rolls back. It is one INSERT rather than
		// an UPDATE joined with the arrays because the planner, without
		// statistics on a young table, joins that by scanning the table once
		// per row.
		specVersions: `INSERT INTO ` + versions + ` AS v (projection, aggregate, version, rev)
SELECT $1, k.aggregate, k.version, CASE WHEN k.expected = 0 THEN 1 ELSE -k.expected END
FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS k(aggregate, expected, version)
ON CONFLICT (projection, aggregate) DO UPDATE
SET version = EXCLUDED.version, rev = v.rev + 1, updated_at = now()
WHERE v.version = CASE WHEN EXCLUDED.rev > 0 THEN 0 ELSE -EXCLUDED.rev END AND v.parked = 0 AND NOT v.blocked
RETURNING v.rev`,
		// setVersions overwrites the states of rows this transaction holds.
		setVersions: `INSERT INTO ` + versions + ` AS v (projection, aggregate, version, parked, blocked)
SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::int[], $5::bool[])
ON CONFLICT (projection, aggregate) DO UPDATE
SET version = EXCLUDED.version, parked = EXCLUDED.parked, blocked = EXCLUDED.blocked,
    rev = v.rev + 1, updated_at = now()`,

		// loadApplied probes the applied log once per (aggregate, version);
		// OFFSET 0 keeps the planner from turning the probes into a scan.
		loadApplied: `SELECT k.aggregate, k.version, a.event_id, a.hash
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
  (fingerprint, source, event_id, aggregate, version, type, data, metadata, reason, error, count)
SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[],
  $7::bytea[], $8::bytea[], $9::text[], $10::text[], $11::bigint[])
ON CONFLICT (fingerprint) DO UPDATE SET count = r.count + EXCLUDED.count, last_seen = now()`,
		operatorLog: `INSERT INTO ` + t("operator_log") + ` (action, projection, aggregate, from_version, to_version, reason)
VALUES ($1, $2, $3, $4, $5, $6)`,
	}
}
