package effects

import (
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// columns are the effects table's columns as scanned by scanEffect.
const columns = `key, projection, kind, event_id, aggregate, version, discriminator, salt, args, state,
  uncertain, attempts, lease_until, job_id, last_error, created_at, updated_at, done_at, recoveries`

// statements are every statement on the effects table: this package is its
// only writer and reader.
type statements struct {
	insert, insertBatch, insertBatchNew, relay, relayAgain string
	claim, start, settle, get, list, stats                 string
	failStuck, claimFailed, retry, cancel                  string
	// River's job table, and the statements that read it to find the
	// intents of dead executors (see Recovery).
	riverJobs, recoverOrphans, orphanStats, orphanList, orphanKeys string
}

func newStatements(schema, riverSchema string) statements {
	t := pgx.Identifier{schema, "effects"}.Sanitize()
	rj := pgx.Identifier{riverSchema, "river_job"}.Sanitize()
	orphans := orphansCTE(t, rj)
	seq := "'" + strings.ReplaceAll(pgx.Identifier{schema, "effects_batch_seq"}.Sanitize(), "'", "''") + "'"
	return statements{
		// insert records intents; keys arrive sorted, so concurrent
		// transactions take the key locks in one order. RETURNING names the
		// keys this statement inserted: only those get a job.
		insert: `INSERT INTO ` + t + ` (key, projection, kind, event_id, aggregate, version, discriminator, salt, args)
SELECT k.key, $1, k.kind, k.event_id, k.aggregate, k.version, k.discriminator, k.salt, k.args
FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::text[], $9::json[])
  AS k(key, kind, event_id, aggregate, version, discriminator, salt, args)
ON CONFLICT (key) DO NOTHING
RETURNING key, kind`,

		// insertBatch records the intents of a large batch under one new
		// batch number, which a relay job enqueues them by; it returns the
		// number, how many intents it inserted and their created_at. insertBatchNew is the
		// same for intents that are all new: a plain insert, which costs a
		// quarter less than ON CONFLICT's speculative insertion, and fails
		// on a key already recorded (Record then rolls it back and uses
		// insertBatch).
		insertBatch:    batchInsert(t, seq, "ON CONFLICT (key) DO NOTHING"),
		insertBatchNew: batchInsert(t, seq, ""),

		// relay lists the intents of batch $1 that no attempt took yet,
		// through effects_pending (migration 006).
		relay: `SELECT key, kind FROM ` + t + ` WHERE batch = $1 AND state = 'pending'`,

		// relayAgain is relay for a relay job that ran before (River
		// rescued it, or it failed): the intents that have a job already
		// are left out.
		relayAgain: `SELECT e.key, e.kind FROM ` + t + ` e WHERE e.batch = $1 AND e.state = 'pending'
  AND NOT EXISTS (SELECT 1 FROM ` + rj + ` j WHERE j.kind = '` + JobKind + `' AND j.args @> jsonb_build_object('key', e.key)
    AND j.state NOT IN ('completed', 'cancelled', 'discarded'))`,

		// claim takes an intent that is pending, retrying, or running with
		// an expired lease (its attempt died; job_id NULL: the
		// reconciliation pass held it, and hands it back to failed) for one
		// attempt: it counts the
		// claim, sets the lease and, unless the last outcome is uncertain
		// and the kind can reconcile ($4: such kinds), starts the attempt —
		// attempts + 1, and uncertain from here until the outcome is
		// recorded. It returns the row and whether Reconcile must be asked
		// first. No row: another attempt holds it, or it is settled.
		claim: `WITH old AS (
  SELECT key, uncertain AND kind = ANY($4::text[]) AS reconcile FROM ` + t + ` WHERE key = $1 FOR UPDATE)
UPDATE ` + t + ` e SET state = 'running', claim = e.claim + 1, lease_until = now() + $2::interval, job_id = $3,
  attempts = e.attempts + CASE WHEN old.reconcile THEN 0 ELSE 1 END, uncertain = true, updated_at = now()
FROM old
WHERE e.key = old.key AND (e.state IN ('pending', 'retrying') OR (e.state = 'running' AND e.lease_until < now() AND e.job_id IS NOT NULL))
RETURNING ` + prefixed("e.", columns) + `, e.claim, old.reconcile`,

		// start begins the attempt after Reconcile found the effect not
		// done, renewing the lease.
		start: `UPDATE ` + t + ` SET attempts = attempts + 1, uncertain = true, lease_until = now() + $3::interval, updated_at = now()
WHERE key = $1 AND claim = $2 AND state = 'running'
RETURNING attempts`,

		// settle records an attempt's outcome, if the attempt still holds
		// the claim.
		settle: `UPDATE ` + t + ` SET state = $3, uncertain = $4, last_error = $5, lease_until = NULL, updated_at = now(),
  done_at = CASE WHEN $3 = 'done' THEN now() END
WHERE key = $1 AND claim = $2 AND state = 'running'`,

		get: `SELECT ` + columns + ` FROM ` + t + ` WHERE key = $1`,

		// list filters on state, kind and projection ('' = any) and pages
		// by (created_at, key).
		list: `SELECT ` + columns + ` FROM ` + t + `
WHERE ($1 = '' OR state = $1) AND ($2 = '' OR kind = $2) AND ($3 = '' OR projection = $3)
ORDER BY created_at, key LIMIT $4`,

		// stats counts the open intents per kind and state, with the
		// oldest waiting one: the pending ones through effects_pending, the
		// others through effects_open (migration 006).
		stats: `SELECT kind, state, count(*), count(*) FILTER (WHERE uncertain), min(created_at)
FROM ` + t + ` WHERE state = 'pending' GROUP BY kind, state
UNION ALL
SELECT kind, state, count(*), count(*) FILTER (WHERE uncertain), min(created_at)
FROM ` + t + ` WHERE state IN ('running', 'retrying', 'failed') GROUP BY kind, state`,

		// failStuck hands back to failed the intents the reconciliation
		// pass claimed (job_id NULL) and whose pass died before recording
		// what Reconcile said; the next pass asks again.
		failStuck: `UPDATE ` + t + ` SET state = 'failed', lease_until = NULL, recoveries = recoveries + 1, updated_at = now()
WHERE key IN (SELECT key FROM ` + t + `
  WHERE state = 'running' AND lease_until < now() AND job_id IS NULL ORDER BY key LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING key, kind`,

		// recoverOrphans takes up to $3 orphans (see orphansCTE) for the
		// reconciliation pass, which gives each a new job in the same
		// transaction: a running one (its claim expired) becomes retrying,
		// and each counts a recovery. The row lock re-checks the state, so
		// an intent claimed meanwhile is left alone. It returns each
		// intent's key, kind, state and updated_at before, attempts, the
		// cause and the transaction's time.
		recoverOrphans: orphans + `, o AS (
  SELECT e.key, e.state, e.updated_at, r.prio FROM orphans r JOIN ` + t + ` e ON e.key = r.key
  WHERE e.state IN ('pending', 'retrying') OR (e.state = 'running' AND e.lease_until < now() AND e.job_id IS NOT NULL)
  ORDER BY e.key LIMIT $3 FOR UPDATE OF e SKIP LOCKED)
UPDATE ` + t + ` e SET state = CASE WHEN e.state = 'running' THEN 'retrying' ELSE e.state END,
  last_error = CASE WHEN e.state = 'running' THEN 'the executor of attempt ' || e.attempts || ' died (its claim expired)' ELSE e.last_error END,
  lease_until = NULL, recoveries = e.recoveries + 1, updated_at = now()
FROM o WHERE e.key = o.key
RETURNING e.key::text, e.kind, o.state, e.attempts, o.updated_at, o.prio, now()`,

		// orphanStats counts the orphans per kind.
		orphanStats: orphans + `SELECT e.kind, count(*) FROM orphans r JOIN ` + t + ` e ON e.key = r.key GROUP BY e.kind`,

		// orphanList is list, of orphans only.
		orphanList: orphans + `SELECT ` + prefixed("e.", columns) + ` FROM orphans r JOIN ` + t + ` e ON e.key = r.key
WHERE ($3 = '' OR e.state = $3) AND ($4 = '' OR e.kind = $4) AND ($5 = '' OR e.projection = $5)
ORDER BY e.created_at, e.key LIMIT $6`,

		// orphanKeys returns the keys among $3 that are orphans.
		orphanKeys: orphans + `SELECT key::text FROM orphans WHERE key = ANY($3::uuid[])`,

		riverJobs: rj,

		// claimFailed takes failed intents whose last outcome is uncertain,
		// of kinds that can reconcile ($1), not touched since the pass began
		// ($4), for the reconciliation pass.
		// job_id NULL marks the pass's claims (see failStuck).
		claimFailed: `UPDATE ` + t + ` SET state = 'running', claim = claim + 1, lease_until = now() + $2::interval, job_id = NULL, updated_at = now()
WHERE key IN (SELECT key FROM ` + t + `
  WHERE state = 'failed' AND uncertain AND kind = ANY($1::text[]) AND updated_at < $4
  ORDER BY key LIMIT $3 FOR UPDATE SKIP LOCKED)
RETURNING ` + columns + `, claim`,

		// retry reopens an intent for an operator; the caller enqueues its
		// job in the same transaction.
		retry: `UPDATE ` + t + ` SET state = CASE WHEN attempts = 0 THEN 'pending' ELSE 'retrying' END,
  lease_until = NULL, updated_at = now()
WHERE key = $1 AND (state IN ('pending', 'retrying', 'failed', 'cancelled') OR (state = 'running' AND lease_until < now()))
RETURNING ` + columns,

		cancel: `UPDATE ` + t + ` SET state = 'cancelled', last_error = $2, lease_until = NULL, updated_at = now()
WHERE key = $1 AND (state IN ('pending', 'retrying', 'failed') OR (state = 'running' AND lease_until < now()))
RETURNING ` + columns,
	}
}

// orphansCTE is the WITH clause that defines "orphans" (key, prio): the open
// intents whose executor died and that no River job will take up ($1: the
// queue, $2: the lease). prio is the cause (recoveryCauses). A River job
// takes an intent up if it is available, or running for less than the
// lease, or — for an intent no attempt holds — scheduled or retryable:
// River's scheduler makes it available when due.
func orphansCTE(t, rj string) string {
	return `WITH stalled AS MATERIALIZED (
  SELECT j.kind, j.args FROM ` + rj + ` j
  WHERE j.state = 'running' AND j.queue = $1 AND j.attempted_at < now() - $2::interval
    AND j.kind IN ('` + JobKind + `', '` + RelayJobKind + `')),
candidates AS (
  SELECT e.key, 1 AS prio FROM ` + t + ` e
    WHERE e.state = 'running' AND e.lease_until < now() AND e.job_id IS NOT NULL
  UNION ALL
  SELECT e.key, 2 FROM stalled s JOIN ` + t + ` e ON e.key = (s.args->>'key')::uuid
    WHERE s.kind = '` + JobKind + `' AND e.state IN ('pending', 'retrying')
  UNION ALL
  SELECT e.key, 3 FROM stalled s JOIN ` + t + ` e ON e.batch = (s.args->>'batch')::bigint AND e.state = 'pending'
    WHERE s.kind = '` + RelayJobKind + `'),
orphans AS (
  SELECT c.key, min(c.prio) AS prio FROM candidates c
  WHERE NOT EXISTS (SELECT 1 FROM ` + rj + ` j
    WHERE j.kind = '` + JobKind + `' AND j.args @> jsonb_build_object('key', c.key)
      AND (j.state IN ('available', 'pending') OR (j.state = 'running' AND j.attempted_at >= now() - $2::interval)
        OR (c.prio > 1 AND j.state IN ('scheduled', 'retryable'))))
  GROUP BY c.key)
`
}

// batchInsert is the statement of insertBatch, with conflict as its ON
// CONFLICT clause.
func batchInsert(table, seq, conflict string) string {
	return `WITH b AS (SELECT nextval(` + seq + `) AS id),
ins AS (INSERT INTO ` + table + ` (key, projection, kind, event_id, aggregate, version, discriminator, salt, args, batch)
  SELECT k.key, $1, k.kind, k.event_id, k.aggregate, k.version, k.discriminator, k.salt, k.args, (SELECT id FROM b)
  FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::text[], $9::json[])
    AS k(key, kind, event_id, aggregate, version, discriminator, salt, args)
  ` + conflict + `
  RETURNING 1)
SELECT (SELECT id FROM b), count(*), now() FROM ins`
}

// prefixed qualifies every column of a column list with prefix.
func prefixed(prefix, cols string) string {
	out := make([]byte, 0, len(cols)+16*len(prefix))
	start := true
	for i := 0; i < len(cols); i++ {
		ch := cols[i]
		if start && ch != ' ' && ch != '\n' {
			out = append(out, prefix...)
			start = false
		}
		out = append(out, ch)
		if ch == ',' {
			start = true
		}
	}
	return string(out)
}

// scanEffect scans the columns of an effects row, then extra.
func scanEffect(row pgx.Row, e *Effect, extra ...any) error {
	var leaseUntil, doneAt *time.Time
	var jobID *int64
	var lastError *string
	var state string
	dest := append([]any{&e.Key, &e.Projection, &e.Kind, &e.EventID, &e.Aggregate, &e.Version, &e.Discriminator, &e.Salt,
		&e.Args, &state, &e.Uncertain, &e.Attempts, &leaseUntil, &jobID, &lastError, &e.CreatedAt, &e.UpdatedAt, &doneAt,
		&e.Recoveries}, extra...)
	if err := row.Scan(dest...); err != nil {
		return err
	}
	e.State = State(state)
	if leaseUntil != nil {
		e.LeaseUntil = *leaseUntil
	}
	if doneAt != nil {
		e.DoneAt = *doneAt
	}
	if jobID != nil {
		e.JobID = *jobID
	}
	if lastError != nil {
		e.LastError = *lastError
	}
	return nil
}
