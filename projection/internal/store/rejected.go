package store

import "github.com/jackc/pgx/v5"

// Rejected is the rejected table: deliveries that could not be stored or
// were invalid, one row per fingerprint, kept for an operator's replay or
// dismissal.
type Rejected struct {
	upsert string
}

func newRejected(t qualify) Rejected {
	return Rejected{
		upsert: `INSERT INTO ` + t("rejected") + ` AS r
  (fingerprint, source, event_id, aggregate, version, type, data, metadata, reason, error, count,
   raw_event_id, raw_aggregate, raw_type, content_type)
SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[],
  $7::bytea[], $8::bytea[], $9::text[], $10::text[], $11::bigint[], $12::bytea[], $13::bytea[], $14::bytea[], $15::text[])
ON CONFLICT (fingerprint) DO UPDATE SET count = r.count + EXCLUDED.count, last_seen = now()`,
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
