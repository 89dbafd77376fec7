package store

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// LogPage is the size of the pages of versions that a version row's applied
// log holds before the full pages move to the applied table (see
// projection's appliedlog.go).
const LogPage = 16

// Versions is the versions table: per projection (gate key) and aggregate,
// the last applied version, the count of parked successors, whether the
// aggregate is blocked by a quarantined event, the row's revision and the
// applied log of its current page.
type Versions struct {
	table               string // qualified
	read, lock, lockOne string
	cas, spec, mark     string
	set, reset          string
}

// appendLog is the SET clause that appends EXCLUDED's log entries to a
// version row's log.
const appendLog = `log_ids = v.log_ids || EXCLUDED.log_ids, log_hashes = v.log_hashes || EXCLUDED.log_hashes`

// logIDs turns a run's ids, given as an array literal or NULL when every id
// is the default one, into the log_ids of n entries.
func logIDs(ids, n string) string {
	return `CASE WHEN ` + ids + ` IS NULL THEN array_fill(NULL::text, ARRAY[` + n + `]) ELSE ` + ids + `::text[] END`
}

// pageStart is the log_base a row keeps once its full pages moved to
// applied (appliedlog.go's pageStart: SQL and Go divide towards zero).
var pageStart = `greatest((v.version - 1) / ` + strconv.Itoa(LogPage) + ` * ` + strconv.Itoa(LogPage) + `, 0)`

func newVersions(t qualify) Versions {
	versions := t("versions")
	return Versions{
		table: versions,
		// Version rows are probed one aggregate at a time: "aggregate =
		// ANY($2)" on the key's second column makes Postgres 15 scan the
		// projection's rows instead. OFFSET 0 keeps the probes from being
		// flattened into a join.
		read: `SELECT k.aggregate, v.version, v.parked, v.blocked, v.rev
FROM unnest($2::text[]) AS k(aggregate)
CROSS JOIN LATERAL (SELECT version, parked, blocked, rev FROM ` + versions + `
  WHERE projection = $1 AND aggregate = k.aggregate OFFSET 0) v`,
		// lock creates the missing rows and locks every row, in one
		// statement whose rows come in the order of $2, which the processor
		// sorts: the global lock order (see txMode). An update that changes
		// nothing is what locks an existing row here: a read FOR UPDATE and
		// an insert of the missing rows would be two statements, taking
		// their locks in two passes, out of order.
		lock: `INSERT INTO ` + versions + ` AS v (projection, aggregate)
SELECT $1, k.aggregate FROM unnest($2::text[]) AS k(aggregate)
ON CONFLICT (projection, aggregate) DO UPDATE SET rev = v.rev
RETURNING v.aggregate, v.version, v.parked, v.blocked, v.rev`,
		lockOne: `SELECT version, parked, blocked FROM ` + versions + `
WHERE projection = $1 AND aggregate = $2 FOR UPDATE`,
		// cas writes the new states of aggregates whose rev is still the
		// one read (rev = new rev - 1); a missing row is inserted. Rows come
		// sorted by aggregate, so concurrent writers lock in one order. A
		// row that does not match stays locked all the same (ON CONFLICT DO
		// UPDATE locks the row before it checks WHERE). It also appends the
		// applied-log entries of the planned runs: $7 holds each row's entry
		// count, $8 its ids (see logIDs), $9 its hashes, 16 bytes each,
		// concatenated.
		cas: `INSERT INTO ` + versions + ` AS v (projection, aggregate, version, parked, blocked, rev, log_ids, log_hashes)
SELECT $1, k.aggregate, k.version, k.parked, k.blocked, k.rev, ` + logIDs("k.ids", "k.n") + `, k.hashes
FROM unnest($2::text[], $3::bigint[], $4::int[], $5::bool[], $6::bigint[], $7::int[], $8::text[], $9::bytea[])
  AS k(aggregate, version, parked, blocked, rev, n, ids, hashes)
ON CONFLICT (projection, aggregate) DO UPDATE
SET version = EXCLUDED.version, parked = EXCLUDED.parked, blocked = EXCLUDED.blocked,
    rev = EXCLUDED.rev, updated_at = now(),
    ` + appendLog + `
WHERE v.rev = EXCLUDED.rev - 1`,
		// spec writes the versions of a batch that is assumed to continue
		// every aggregate where it stands (see txMode.speculative), without
		// reading the rows first: a row moves from the expected version to
		// the run's last one only if nothing is parked or quarantined. The
		// expected version rides in the inserted rev: 1 for a new aggregate
		// (expected version 0), minus the expected version otherwise. It
		// returns how many rows were written as assumed: one short — a row
		// not at the expected version, or changed concurrently (ON CONFLICT
		// DO UPDATE checks the latest committed row), or inserted where one
		// was expected to exist (a negative rev) — and the assumption was
		// wrong: the transaction rolls back. It is one INSERT rather than an
		// UPDATE joined with the arrays because the planner, without
		// statistics on a young table, joins that by scanning the table once
		// per row.
		// The runs' applied-log entries are appended as in cas ($5 ids, $6
		// hashes; a run has version - expected entries). Rows come sorted by
		// aggregate, as everywhere.
		spec: `WITH w AS (INSERT INTO ` + versions + ` AS v (projection, aggregate, version, rev, log_ids, log_hashes)
SELECT $1, k.aggregate, k.version, CASE WHEN k.expected = 0 THEN 1 ELSE -k.expected END,
  ` + logIDs("k.ids", "(k.version - k.expected)::int") + `, k.hashes
FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::bytea[]) AS k(aggregate, expected, version, ids, hashes)
ON CONFLICT (projection, aggregate) DO UPDATE
SET version = EXCLUDED.version, rev = v.rev + 1, updated_at = now(),
    ` + appendLog + `
WHERE v.version = CASE WHEN EXCLUDED.rev > 0 THEN 0 ELSE -EXCLUDED.rev END AND v.parked = 0 AND NOT v.blocked
RETURNING v.rev)
SELECT count(*) FILTER (WHERE rev > 0) FROM w`,
		// mark inserts the empty version rows of the aggregates of an inline
		// projection's fast path that start at version 1, and returns how
		// many it inserted (see inline_gate.go).
		mark: `WITH w AS (INSERT INTO ` + versions + ` (projection, aggregate)
SELECT $1, k.aggregate FROM unnest($2::text[]) AS k(aggregate)
ON CONFLICT (projection, aggregate) DO NOTHING RETURNING 1)
SELECT count(*) FROM w`,
		// set overwrites the state of a row this transaction holds, dropping
		// the last $6 entries of its log: those of a run that cas planned
		// and a careful attempt cut short (before the log's full pages move
		// out).
		set: `UPDATE ` + versions + `
SET version = $3, parked = $4, blocked = $5, rev = rev + 1, updated_at = now(),
    log_ids = log_ids[1:cardinality(log_ids) - $6],
    log_hashes = substring(log_hashes FOR octet_length(log_hashes) - 16 * $6)
WHERE projection = $1 AND aggregate = $2`,
		// reset writes an operator's decision about one held row; its log
		// starts again, empty, at the new version (Applied.QueueSpillAll
		// moved the old one's entries to applied, where the operator's own
		// entries go).
		reset: `UPDATE ` + versions + `
SET version = $3, parked = $4, blocked = $5, rev = rev + 1, updated_at = now(),
    log_base = $3, log_ids = '{}', log_hashes = ''
WHERE projection = $1 AND aggregate = $2`,
	}
}

// QueueRead queues the read of the version rows of aggs (sorted) of the
// projection with gate key key: rows of (aggregate, version, parked,
// blocked, rev); locked, it creates the missing rows and locks every row,
// in the order of aggs (the global lock order).
func (v *Versions) QueueRead(b *pgx.Batch, key string, aggs []string, locked bool) *pgx.QueuedQuery {
	if locked {
		return b.Queue(v.lock, key, aggs)
	}
	return b.Queue(v.read, key, aggs)
}

// Lock creates the missing version rows of aggs (sorted) and locks every
// row, in order, returning them as QueueRead does.
func (v *Versions) Lock(ctx context.Context, q querier, key string, aggs []string) (pgx.Rows, error) {
	return q.Query(ctx, v.lock, key, aggs)
}

// LockOne locks the version row of agg; its row is (version, parked,
// blocked), none when the aggregate has no row.
func (v *Versions) LockOne(ctx context.Context, q querier, key, agg string) pgx.Row {
	return q.QueryRow(ctx, v.lockOne, key, agg)
}

// LogArgs are the applied-log entries a version write appends, row by row:
// the entry count, the ids as an array literal (nil when every id is the
// default one) and the 16-byte hashes concatenated.
type LogArgs struct {
	N      []int32
	IDs    []*string
	Hashes [][]byte
}

// QueueSpeculate queues the speculative write of runs that continue
// aggregates aggs (sorted) from version expected to version to; its one
// row is how many rows were written as assumed.
func (v *Versions) QueueSpeculate(b *pgx.Batch, key string, aggs []string, expected, to []int64, log LogArgs) *pgx.QueuedQuery {
	return b.Queue(v.spec, key, aggs, expected, to, log.IDs, log.Hashes)
}

// QueueWrite queues the compare-and-set write of the new states of aggs
// (sorted) whose revision is still revs[i] - 1; its command tag counts
// the rows written.
func (v *Versions) QueueWrite(b *pgx.Batch, key string, aggs []string, versions []int64, parked []int32, blocked []bool, revs []int64,
	log LogArgs) *pgx.QueuedQuery {
	return b.Queue(v.cas, key, aggs, versions, parked, blocked, revs, log.N, log.IDs, log.Hashes)
}

// QueueMark queues the insertion of the empty version rows of aggs
// (sorted, starting at version 1); its one row counts the rows inserted.
func (v *Versions) QueueMark(b *pgx.Batch, key string, aggs []string) *pgx.QueuedQuery {
	return b.Queue(v.mark, key, aggs)
}

// QueueSet queues the overwrite of the state of agg's row, which the
// transaction holds, dropping the last trim entries of its log.
func (v *Versions) QueueSet(b *pgx.Batch, key, agg string, version int64, parked int32, blocked bool, trim int64) *pgx.QueuedQuery {
	return b.Queue(v.set, key, agg, version, parked, blocked, trim)
}

// QueueReset queues an operator's new state of agg's row, which the
// transaction holds, its log starting again, empty, at version.
func (v *Versions) QueueReset(b *pgx.Batch, key, agg string, version int64, parked int32, blocked bool) *pgx.QueuedQuery {
	return b.Queue(v.reset, key, agg, version, parked, blocked)
}

// InlineVersions reads the versions of the rows of aggs in inline table t:
// rows of (aggregate, version); an aggregate without a row has none.
func (v *Versions) InlineVersions(ctx context.Context, q querier, t InlineRef, aggs []string) (pgx.Rows, error) {
	return q.Query(ctx, `SELECT `+t.Key+`, `+t.Version+` FROM `+t.Table+` WHERE `+t.Key+` = ANY($1)`, aggs)
}

// Current reads the version rows of (keys[i], aggs[i]): rows of (gate key,
// aggregate, version); a pair without a row has none.
func (v *Versions) Current(ctx context.Context, q querier, keys, aggs []string) (pgx.Rows, error) {
	return q.Query(ctx, `SELECT v.projection, v.aggregate, v.version
FROM unnest($1::text[], $2::text[]) AS k(projection, aggregate)
JOIN `+v.table+` v ON v.projection = k.projection AND v.aggregate = k.aggregate`, keys, aggs)
}
