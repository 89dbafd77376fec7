package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Conflicts is the conflicts table: deliveries of an applied version whose
// event id or payload differ from the applied event's, counted per
// (projection, aggregate, version, incoming event id and hash).
type Conflicts struct {
	upsert, lock, ack string
	list              [2]string
}

func newConflicts(t qualify) Conflicts {
	return Conflicts{
		upsert: `INSERT INTO ` + t("conflicts") + ` AS c
  (projection, aggregate, version, existing_state, existing_event_id, existing_hash,
   incoming_event_id, incoming_hash, type, data, metadata, count)
SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::text[], $5::text[], $6::bytea[],
  $7::text[], $8::bytea[], $9::text[], $10::bytea[], $11::bytea[], $12::bigint[])
ON CONFLICT (projection, aggregate, version, incoming_event_id, incoming_hash) DO UPDATE
SET count = c.count + EXCLUDED.count, last_seen = now()`,
		lock: `SELECT projection, aggregate, version, acked_at IS NOT NULL FROM ` + t("conflicts") + `
WHERE id = $1 FOR UPDATE`,
		ack: `UPDATE ` + t("conflicts") + ` SET acked_at = now(), ack_reason = $2 WHERE id = $1`,
		list: payloads(func(payload string) string {
			return `SELECT id, projection, aggregate, version, existing_state, existing_event_id, existing_hash,
  incoming_event_id, incoming_hash, type, ` + payload + `, count, first_seen, last_seen, acked_at, ack_reason
FROM ` + t("conflicts") + `
WHERE ` + KeyCondition(1, 6) + ` AND ($2 = '' OR aggregate = $2) AND id > $4 AND (NOT $5 OR acked_at IS NULL)
ORDER BY id LIMIT $3`
		}),
	}
}

// ConflictRows are conflicts to record, column by column (index-aligned),
// sorted by their key so that writers lock rows in one order.
type ConflictRows struct {
	Aggregates, States, ExistingIDs []string
	Versions                        []int64
	ExistingHashes                  [][]byte
	IncomingIDs, Types              []string
	IncomingHashes, Data, Metadata  [][]byte
	Counts                          []int64
}

// QueueUpsert queues the recording of rows, counting again the ones seen
// before.
func (c *Conflicts) QueueUpsert(b *pgx.Batch, key string, r ConflictRows) *pgx.QueuedQuery {
	return b.Queue(c.upsert, key, r.Aggregates, r.Versions, r.States, r.ExistingIDs, r.ExistingHashes,
		r.IncomingIDs, r.IncomingHashes, r.Types, r.Data, r.Metadata, r.Counts)
}

// Lock locks conflict id: a row of (gate key, aggregate, version, acked),
// none when there is none.
func (c *Conflicts) Lock(ctx context.Context, q querier, id int64) pgx.Row {
	return q.QueryRow(ctx, c.lock, id)
}

// QueueAck queues the acknowledgement of conflict id, for reason.
func (c *Conflicts) QueueAck(b *pgx.Batch, id int64, reason string) *pgx.QueuedQuery {
	return b.Queue(c.ack, id, reason)
}

// List lists the conflicts of keys in id order: rows of (id, gate key,
// aggregate, version, existing state, existing event id, existing hash,
// incoming event id, incoming hash, type, data, metadata, count, first seen,
// last seen, acked at, ack reason).
func (c *Conflicts) List(ctx context.Context, q querier, keys Keys, p Page) (pgx.Rows, error) {
	return q.Query(ctx, pick(c.list, p), keys.Include, p.Aggregate, p.Limit, p.AfterID, p.Open, keys.Exclude)
}
