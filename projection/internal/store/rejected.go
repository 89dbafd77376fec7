package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Rejected is the rejected table: deliveries that could not be stored or
// were invalid, one row per fingerprint, kept for an operator's replay or
// dismissal.
type Rejected struct {
	upsert, resolveVersions, load, setReason, replayed, lock, dismiss string
	list                                                              [2]string
	counts                                                            string
}

func newRejected(t qualify) Rejected {
	return Rejected{
		upsert: `INSERT INTO ` + t("rejected") + ` AS r
  (fingerprint, source, event_id, aggregate, version, type, data, metadata, reason, error, count,
   raw_event_id, raw_aggregate, raw_type, content_type)
SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[],
  $7::bytea[], $8::bytea[], $9::text[], $10::text[], $11::bigint[], $12::bytea[], $13::bytea[], $14::bytea[], $15::text[])
ON CONFLICT (fingerprint) DO UPDATE SET count = r.count + EXCLUDED.count, last_seen = now()`,
		resolveVersions: `UPDATE ` + t("rejected") + ` SET resolved_at = now(), resolution = $4, resolved_by = $5, resolve_reason = $6
WHERE md5(aggregate) = md5($1) AND aggregate = $1 AND version BETWEEN $2 AND $3 AND resolved_at IS NULL RETURNING id`,
		load: `SELECT source, event_id, aggregate, version, type, coalesce(data, ''), metadata,
  raw_event_id, raw_aggregate, raw_type, content_type FROM ` + t("rejected") + ` WHERE id = $1`,
		setReason: `UPDATE ` + t("rejected") + ` SET reason = $2, error = $3 WHERE id = $1`,
		// replayed writes the operator log's entry in the same statement,
		// only if the row was resolved.
		replayed: `WITH r AS (
  UPDATE ` + t("rejected") + ` SET replayed_at = now(), resolved_at = now(), resolution = 'replayed',
    resolved_by = $2, resolve_reason = $3 WHERE id = $1 AND last_seen <> now() RETURNING id)
INSERT INTO ` + t("operator_log") + ` (action, projection, generation, aggregate, from_version, to_version, reason, actor)
SELECT 'replay-rejected', '', NULL, $4, $5, $5, $6, $2 FROM r`,
		lock: `SELECT aggregate, version, resolution, resolved_at IS NOT NULL FROM ` + t("rejected") + `
WHERE id = $1 FOR UPDATE`,
		dismiss: `UPDATE ` + t("rejected") + ` SET resolved_at = now(), resolution = 'dismissed', resolved_by = $2, resolve_reason = $3
WHERE id = $1`,
		counts: `SELECT count(*), count(*) FILTER (WHERE resolved_at IS NULL) FROM ` + t("rejected"),
		list: payloads(func(payload string) string {
			return `SELECT id, fingerprint, source, event_id, aggregate, version, type, content_type, ` + payload + `,
  coalesce(octet_length(data), 0), reason, error, count, first_seen, last_seen, replayed_at,
  resolved_at, resolution, resolved_by, resolve_reason
FROM ` + t("rejected") + `
WHERE ($1 = '' OR aggregate = $1) AND id > $3 AND (NOT $4 OR resolved_at IS NULL)
ORDER BY id LIMIT $2`
		}),
	}
}

// RejectedRows are rejected deliveries to record, column by column
// (index-aligned), sorted by fingerprint so that writers lock rows in one
// order.
type RejectedRows struct {
	Fingerprints                    [][]byte
	Sources, IDs, Aggregates        []string
	Versions                        []int64
	Types                           []string
	Data, Metadata                  [][]byte
	Reasons, Errors                 []string
	Counts                          []int64
	RawIDs, RawAggregates, RawTypes [][]byte
	ContentTypes                    []string
}

// QueueUpsert queues the recording of rows, counting again the ones seen
// before.
func (r *Rejected) QueueUpsert(b *pgx.Batch, rows RejectedRows) *pgx.QueuedQuery {
	return b.Queue(r.upsert, rows.Fingerprints, rows.Sources, rows.IDs, rows.Aggregates, rows.Versions, rows.Types,
		rows.Data, rows.Metadata, rows.Reasons, rows.Errors, rows.Counts, rows.RawIDs, rows.RawAggregates, rows.RawTypes, rows.ContentTypes)
}

// Resolution is who resolved rejected deliveries, how and why.
type Resolution struct {
	Resolution, By, Reason string
}

// QueueResolveVersions queues the resolution of the pending rejected
// deliveries of versions from … to of agg; its rows are their ids.
func (r *Rejected) QueueResolveVersions(b *pgx.Batch, agg string, from, to int64, res Resolution) *pgx.QueuedQuery {
	return b.Queue(r.resolveVersions, agg, from, to, res.Resolution, res.By, res.Reason)
}

// Load reads the rejected delivery id: a row of (source, event id,
// aggregate, version, type, data, metadata, raw event id, raw aggregate,
// raw type, content type), none when there is none.
func (r *Rejected) Load(ctx context.Context, q querier, id int64) pgx.Row {
	return q.QueryRow(ctx, r.load, id)
}

// SetReason records the reason and error of a new validation of id.
func (r *Rejected) SetReason(ctx context.Context, q querier, id int64, reason, text string) error {
	_, err := q.Exec(ctx, r.setReason, id, reason, text)
	return err
}

// Replayed resolves id as replayed, with its operator log entry (the
// replay of agg's version by res.By), unless it was rejected again in this
// transaction (its last_seen is the transaction's time).
func (r *Rejected) Replayed(ctx context.Context, q querier, id int64, res Resolution, agg string, version int64, logReason string) error {
	_, err := q.Exec(ctx, r.replayed, id, res.By, res.Reason, agg, version, logReason)
	return err
}

// Lock locks the rejected delivery id: a row of (aggregate, version,
// resolution, resolved), none when there is none.
func (r *Rejected) Lock(ctx context.Context, q querier, id int64) pgx.Row {
	return q.QueryRow(ctx, r.lock, id)
}

// QueueDismiss queues the dismissal of id by by, for reason.
func (r *Rejected) QueueDismiss(b *pgx.Batch, id int64, by, reason string) *pgx.QueuedQuery {
	return b.Queue(r.dismiss, id, by, reason)
}

// List lists rejected deliveries in id order: rows of (id, fingerprint,
// source, event id, aggregate, version, type, content type, data, metadata,
// size, reason, error, count, first seen, last seen, replayed at, resolved
// at, resolution, resolved by, resolve reason).
func (r *Rejected) List(ctx context.Context, q querier, p Page) (pgx.Rows, error) {
	return q.Query(ctx, pick(r.list, p), p.Aggregate, p.Limit, p.AfterID, p.Open)
}
