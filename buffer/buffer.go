package buffer

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/migrations"
)

// Buffer reads and writes the parked table of one schema. It holds no
// connection; each method takes the transaction or batch to use. A Buffer is
// safe for concurrent use.
type Buffer struct {
	schema  string
	park    string
	load    string
	delete  string
	keys    string
	list    string
	stats   string
	perAggr string
	clear   string
	unmatch string
}

// New returns a Buffer for the tables in schema ("" means
// migrations.DefaultSchema).
func New(schema string) *Buffer {
	if schema == "" {
		schema = migrations.DefaultSchema
	}
	t := pgx.Identifier{schema, "parked"}.Sanitize()
	return &Buffer{
		schema: schema,
		park: `INSERT INTO ` + t + ` (projection, aggregate, version, event_id, hash, type, data, metadata)
SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::text[], $5::bytea[], $6::text[], $7::bytea[], $8::bytea[])
ON CONFLICT (projection, aggregate, version) DO NOTHING`,
		// One probe per aggregate (see keys and delete below).
		load: `SELECT k.aggregate, p.version, p.event_id, p.hash, p.type, p.data, p.metadata, p.parked_at
FROM unnest($2::text[]) WITH ORDINALITY AS k(aggregate, n)
CROSS JOIN LATERAL (SELECT version, event_id, hash, type, data, metadata, parked_at FROM ` + t + `
  WHERE projection = $1 AND aggregate = k.aggregate OFFSET 0) p
ORDER BY k.n, p.version`,
		keys: `SELECT k.aggregate, k.version, p.event_id, p.hash, p.type, p.parked_at
FROM unnest($2::text[], $3::bigint[]) AS k(aggregate, version)
CROSS JOIN LATERAL (SELECT event_id, hash, type, parked_at FROM ` + t + `
  WHERE projection = $1 AND aggregate = k.aggregate AND version = k.version OFFSET 0) p`,
		// The keys are probed one by one (OFFSET 0 keeps the planner from
		// scanning the projection's rows instead), then deleted by ctid.
		delete: `DELETE FROM ` + t + ` WHERE ctid = ANY(ARRAY(
  SELECT p.ctid FROM unnest($2::text[], $3::bigint[]) AS d(aggregate, version)
  CROSS JOIN LATERAL (SELECT ctid FROM ` + t + `
    WHERE projection = $1 AND aggregate = d.aggregate AND version = d.version OFFSET 0) p))`,
		list: `SELECT p.projection, p.aggregate, p.version, p.event_id, p.hash, p.type,
  CASE WHEN $5 THEN NULL ELSE p.data END, CASE WHEN $5 THEN NULL ELSE p.metadata END, p.parked_at
FROM ` + t + ` p
WHERE (cardinality($1::text[]) = 0 OR p.projection = ANY($1)) AND NOT (p.projection = ANY($6::text[]))
  AND ($2 = '' OR p.aggregate = $2) AND ($4::timestamptz IS NULL OR p.parked_at <= $4)
ORDER BY p.parked_at, p.projection, p.aggregate, p.version LIMIT $3`,
		stats: `SELECT p.projection, count(*), count(DISTINCT p.aggregate), min(p.parked_at)
FROM ` + t + ` p WHERE (coalesce(cardinality($1::text[]), 0) = 0 OR p.projection = ANY($1)) GROUP BY p.projection ORDER BY p.projection`,
		perAggr: `SELECT p.projection, p.aggregate, count(*), min(p.version), max(p.version), min(p.parked_at)
FROM ` + t + ` p
WHERE (cardinality($1::text[]) = 0 OR p.projection = ANY($1)) AND NOT (p.projection = ANY($5::text[]))
  AND ($4::timestamptz IS NULL OR p.parked_at <= $4)
GROUP BY p.projection, p.aggregate
HAVING ($2 = '' OR p.aggregate = $2)
ORDER BY min(p.parked_at), p.projection, p.aggregate LIMIT $3`,
		clear: `DELETE FROM ` + t + ` WHERE projection = $1`,
		unmatch: `SELECT count(*) FROM ` + t + ` n WHERE n.projection = $1
  AND NOT EXISTS (SELECT 1 FROM ` + t + ` o WHERE o.projection = $2 AND o.aggregate = n.aggregate AND o.version = n.version)`,
	}
}

// Schema returns the schema the Buffer works in.
func (b *Buffer) Schema() string { return b.schema }

// Parked is one parked event.
type Parked struct {
	aggregate.Event
	// Hash is the event's payload hash (aggregate.Event.Hash).
	Hash []byte
	// ParkedAt is when the event was first parked.
	ParkedAt time.Time
}

// QueuePark queues an idempotent insert of events into the parked table of
// projection. Events already parked at the same (aggregate, version) are left
// as they are. hashes[i] is events[i].Hash(), passed in because the processor
// has computed it already.
func (b *Buffer) QueuePark(batch *pgx.Batch, projection string, events []aggregate.Event, hashes [][]byte) {
	n := len(events)
	aggs, ids, types := make([]string, n), make([]string, n), make([]string, n)
	versions := make([]int64, n)
	data, meta := make([][]byte, n), make([][]byte, n)
	for i, e := range events {
		aggs[i], versions[i], ids[i], types[i] = e.Aggregate, e.Version, e.StableID(), e.Type
		data[i], meta[i] = e.Data, e.Metadata
	}
	batch.Queue(b.park, projection, aggs, versions, ids, hashes, types, data, meta)
}

// QueueLoad queues a read of every parked event of the given aggregates of
// projection, in the order of aggregates and then by version; fn receives
// them when the batch is sent.
func (b *Buffer) QueueLoad(batch *pgx.Batch, projection string, aggregates []string, fn func([]Parked)) {
	batch.Queue(b.load, projection, aggregates).Query(func(rows pgx.Rows) error {
		var out []Parked
		for rows.Next() {
			var p Parked
			if err := rows.Scan(&p.Aggregate, &p.Version, &p.ID, &p.Hash, &p.Type, &p.Data, &p.Metadata, &p.ParkedAt); err != nil {
				return fmt.Errorf("buffer: scan parked: %w", err)
			}
			out = append(out, p)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("buffer: load parked: %w", err)
		}
		fn(out)
		return nil
	})
}

// QueueLoadKeys queues a read of the parked events (aggregates[i],
// versions[i]) of projection that exist, without their data and metadata:
// enough to tell a redelivery of a parked event from a conflicting one. fn
// receives them when the batch is sent.
func (b *Buffer) QueueLoadKeys(batch *pgx.Batch, projection string, aggregates []string, versions []int64, fn func([]Parked)) {
	batch.Queue(b.keys, projection, aggregates, versions).Query(func(rows pgx.Rows) error {
		var out []Parked
		for rows.Next() {
			var p Parked
			if err := rows.Scan(&p.Aggregate, &p.Version, &p.ID, &p.Hash, &p.Type, &p.ParkedAt); err != nil {
				return fmt.Errorf("buffer: scan parked key: %w", err)
			}
			out = append(out, p)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("buffer: load parked keys: %w", err)
		}
		fn(out)
		return nil
	})
}

// QueueDelete queues the deletion of the parked events (aggregates[i],
// versions[i]) of projection, once they have been applied.
func (b *Buffer) QueueDelete(batch *pgx.Batch, projection string, aggregates []string, versions []int64) {
	batch.Queue(b.delete, projection, aggregates, versions)
}

// QueueClear queues the deletion of every parked event of projection: its
// gate state is being reset (an in-place rebuild) or dropped (a retired
// generation).
func (b *Buffer) QueueClear(batch *pgx.Batch, projection string) {
	batch.Queue(b.clear, projection)
}

// QueueUnmatched queues a count of the events projection has parked that
// other has not parked at the same (aggregate, version): a new generation
// compared with the live one before a switch. fn receives it when the
// batch is sent.
func (b *Buffer) QueueUnmatched(batch *pgx.Batch, projection, other string, fn func(int64)) {
	batch.Queue(b.unmatch, projection, other).QueryRow(func(row pgx.Row) error {
		var n int64
		if err := row.Scan(&n); err != nil {
			return fmt.Errorf("buffer: compare parked: %w", err)
		}
		fn(n)
		return nil
	})
}

// Filter selects the parked events of QueueList and the aggregates of
// QueueWaiting. The zero value selects everything, up to the default limit.
type Filter struct {
	// Include, when not empty, keeps only these projections (gate keys:
	// a generation's projection is "<name>@<n>").
	Include []string
	// Exclude leaves these projections out.
	Exclude []string
	// Aggregate, when set, keeps only this aggregate.
	Aggregate string
	// OlderThan, when positive, keeps only events parked at least that long ago.
	OlderThan time.Duration
	// Limit caps the rows; zero or less means 100.
	Limit int
	// OmitPayloads leaves the events' data and metadata out of QueueList
	// (nil).
	OmitPayloads bool
}

// before returns the parked_at bound of OlderThan, or nil.
func (f Filter) before() *time.Time {
	if f.OlderThan <= 0 {
		return nil
	}
	t := time.Now().Add(-f.OlderThan)
	return &t
}

func (f Filter) limit() int {
	if f.Limit <= 0 {
		return 100
	}
	return f.Limit
}

// nonNil returns xs, or an empty slice for nil (the statements take arrays).
func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

// Entry is a parked event as operators see it. The aggregate's applied
// version, which the parked table does not hold, is the caller's to add
// (package projection owns the versions table).
type Entry struct {
	Parked
	// Projection is the projection the event waits in.
	Projection string
}

// QueueList queues a read of the parked events f selects, the longest
// parked first; fn receives them when the batch is sent.
func (b *Buffer) QueueList(batch *pgx.Batch, f Filter, fn func([]Entry)) {
	batch.Queue(b.list, nonNil(f.Include), f.Aggregate, f.limit(), f.before(), f.OmitPayloads, nonNil(f.Exclude)).Query(func(rows pgx.Rows) error {
		es, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Entry, error) {
			var e Entry
			err := row.Scan(&e.Projection, &e.Aggregate, &e.Version, &e.ID, &e.Hash, &e.Type, &e.Data, &e.Metadata, &e.ParkedAt)
			return e, err
		})
		if err != nil {
			return fmt.Errorf("buffer: list parked: %w", err)
		}
		fn(es)
		return nil
	})
}

// Waiting describes one aggregate with parked events. Like Entry, it
// leaves the aggregate's applied version to the caller.
type Waiting struct {
	Projection string
	Aggregate  string
	// Count is how many events are parked.
	Count int64
	// MinVersion and MaxVersion bound the parked versions.
	MinVersion, MaxVersion int64
	// Oldest is when the oldest of them was parked.
	Oldest time.Time
}

// QueueWaiting queues a read of the aggregates with parked events that f
// selects, the longest waiting first; fn receives them when the batch is
// sent.
func (b *Buffer) QueueWaiting(batch *pgx.Batch, f Filter, fn func([]Waiting)) {
	batch.Queue(b.perAggr, nonNil(f.Include), f.Aggregate, f.limit(), f.before(), nonNil(f.Exclude)).Query(func(rows pgx.Rows) error {
		ws, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Waiting, error) {
			var w Waiting
			err := row.Scan(&w.Projection, &w.Aggregate, &w.Count, &w.MinVersion, &w.MaxVersion, &w.Oldest)
			return w, err
		})
		if err != nil {
			return fmt.Errorf("buffer: list waiting aggregates: %w", err)
		}
		fn(ws)
		return nil
	})
}

// Stats summarises one projection's parked table.
type Stats struct {
	Projection string
	// Events is the number of parked events.
	Events int64
	// Aggregates is the number of aggregates with parked events.
	Aggregates int64
	// Oldest is when the oldest parked event was parked (zero if none).
	Oldest time.Time
}

// QueueStats queues the parked counts per projection of projections (none
// means all; projections without parked events are absent); fn receives
// them when the batch is sent.
func (b *Buffer) QueueStats(batch *pgx.Batch, projections []string, fn func([]Stats)) {
	batch.Queue(b.stats, projections).Query(func(rows pgx.Rows) error {
		ss, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Stats, error) {
			var s Stats
			err := row.Scan(&s.Projection, &s.Events, &s.Aggregates, &s.Oldest)
			return s, err
		})
		if err != nil {
			return fmt.Errorf("buffer: parked stats: %w", err)
		}
		fn(ss)
		return nil
	})
}
