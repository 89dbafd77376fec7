package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Quarantine is the quarantine table: per projection and aggregate, the
// event whose handler kept failing, which blocks the aggregate until an
// operator retries or skips it.
type Quarantine struct {
	loadRefs, load, upsert, delete string
	list                           [2]string
	unmatched                      string
}

func newQuarantine(t qualify) Quarantine {
	quarantine := t("quarantine")
	return Quarantine{
		loadRefs: `SELECT k.aggregate, q.version, q.event_id, q.hash
FROM unnest($2::text[]) AS k(aggregate)
CROSS JOIN LATERAL (SELECT version, event_id, hash FROM ` + quarantine + `
  WHERE projection = $1 AND aggregate = k.aggregate OFFSET 0) q`,
		load: `SELECT version, event_id, hash, type, data, metadata FROM ` + quarantine + `
WHERE projection = $1 AND aggregate = $2`,
		upsert: `INSERT INTO ` + quarantine + ` AS q
  (projection, aggregate, version, event_id, hash, type, data, metadata, error, attempts)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (projection, aggregate) DO UPDATE
SET version = EXCLUDED.version, event_id = EXCLUDED.event_id, hash = EXCLUDED.hash, type = EXCLUDED.type,
    data = EXCLUDED.data, metadata = EXCLUDED.metadata, error = EXCLUDED.error,
    attempts = q.attempts + EXCLUDED.attempts, last_attempt_at = now()`,
		delete: `DELETE FROM ` + quarantine + ` WHERE projection = $1 AND aggregate = $2`,
		unmatched: `SELECT count(*) FROM ` + quarantine + ` n WHERE n.projection = $1
  AND NOT EXISTS (SELECT 1 FROM ` + quarantine + ` o WHERE o.projection = $2 AND o.aggregate = n.aggregate AND o.version = n.version)`,
		list: payloads(func(payload string) string {
			return `SELECT projection, aggregate, version, event_id, type, ` + payload + `, error, attempts,
  quarantined_at, last_attempt_at
FROM ` + quarantine + `
WHERE ` + KeyCondition(1, 4) + ` AND ($2 = '' OR aggregate = $2)
ORDER BY quarantined_at, projection, aggregate LIMIT $3`
		}),
	}
}

// QueueLoadRefs queues the read of the quarantined events of aggs: rows of
// (aggregate, version, event id, hash).
func (q *Quarantine) QueueLoadRefs(b *pgx.Batch, key string, aggs []string) *pgx.QueuedQuery {
	return b.Queue(q.loadRefs, key, aggs)
}

// Load reads agg's quarantined event: a row of (version, event id, hash,
// type, data, metadata), none when there is none.
func (q *Quarantine) Load(ctx context.Context, db querier, key, agg string) pgx.Row {
	return db.QueryRow(ctx, q.load, key, agg)
}

// Event is a quarantined event as QueueUpsert writes it.
type Event struct {
	Version        int64
	ID             string
	Hash           []byte
	Type           string
	Data, Metadata []byte
	// Error is the handler's last error; Attempts counts the attempts it
	// failed, added to the row's.
	Error    string
	Attempts int
}

// QueueUpsert queues the quarantine of e for agg, replacing the one there
// (its attempts added).
func (q *Quarantine) QueueUpsert(b *pgx.Batch, key, agg string, e Event) *pgx.QueuedQuery {
	return b.Queue(q.upsert, key, agg, e.Version, e.ID, e.Hash, e.Type, e.Data, e.Metadata, e.Error, e.Attempts)
}

// QueueDelete queues the deletion of agg's quarantined event.
func (q *Quarantine) QueueDelete(b *pgx.Batch, key, agg string) *pgx.QueuedQuery {
	return b.Queue(q.delete, key, agg)
}

// List lists the quarantined events of keys, the longest quarantined first:
// rows of (gate key, aggregate, version, event id, type, data, metadata,
// error, attempts, quarantined at, last attempt at).
func (q *Quarantine) List(ctx context.Context, db querier, keys Keys, p Page) (pgx.Rows, error) {
	return db.Query(ctx, pick(q.list, p), keys.Include, p.Aggregate, p.Limit, keys.Exclude)
}

// Unmatched counts the events quarantined under key that are not
// quarantined, at the same version, under other.
func (q *Quarantine) Unmatched(ctx context.Context, db querier, key, other string) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, q.unmatched, key, other).Scan(&n)
	return n, err
}
