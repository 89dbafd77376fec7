package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// OpLog is the operator_log table: every operator decision and every
// finding a source or a rebuild records, in id order.
type OpLog struct {
	insert, insertOnce, list string
}

func newOpLog(t qualify) OpLog {
	ol := t("operator_log")
	insert := `INSERT INTO ` + ol + ` (action, projection, generation, aggregate, from_version, to_version, reason, actor)
`
	return OpLog{
		insert: insert + `VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		// insertOnce writes the entry unless one with the same action,
		// projection, generation, aggregate and versions exists.
		insertOnce: insert + `SELECT $1, $2, $3, $4, $5, $6, $7, $8
WHERE NOT EXISTS (SELECT 1 FROM ` + ol + ` WHERE action = $1 AND projection = $2
  AND generation IS NOT DISTINCT FROM $3::integer AND aggregate = $4
  AND from_version IS NOT DISTINCT FROM $5 AND to_version IS NOT DISTINCT FROM $6)`,
		list: `SELECT id, at, action, projection, coalesce(generation, 0), aggregate, from_version, to_version, reason, actor
FROM ` + ol + `
WHERE ($1 = '' OR projection = $1) AND ($2 = '' OR aggregate = $2) AND ($3 = '' OR action = $3) AND id > $5
  AND ($6 = 0 OR generation = $6)
ORDER BY id LIMIT $4`,
	}
}

// OpEntry is one entry to write into the operator log.
type OpEntry struct {
	Action     string
	Projection string
	// Generation is the generation concerned; 0 writes NULL (none, or not
	// known).
	Generation int
	Aggregate  string
	// From and To are the versions concerned: an int64, a *int64 or nil
	// (NULL).
	From, To any
	Reason   string
	// Actor names who acted.
	Actor string
}

// args returns e as the parameters of insert and insertOnce.
func (e OpEntry) args() []any {
	var gen any
	if e.Generation != 0 {
		gen = int32(e.Generation)
	}
	return []any{e.Action, e.Projection, gen, e.Aggregate, e.From, e.To, e.Reason, e.Actor}
}

// Queue queues the write of e.
func (o *OpLog) Queue(b *pgx.Batch, e OpEntry) *pgx.QueuedQuery {
	return b.Queue(o.insert, e.args()...)
}

// Insert writes e.
func (o *OpLog) Insert(ctx context.Context, q querier, e OpEntry) error {
	_, err := q.Exec(ctx, o.insert, e.args()...)
	return err
}

// InsertOnce writes e unless an entry with the same action, projection,
// generation, aggregate and versions exists, and reports whether it wrote
// it. Two transactions writing the same entry at once must serialize
// themselves (the caller's lock) for it to be written once.
func (o *OpLog) InsertOnce(ctx context.Context, q querier, e OpEntry) (bool, error) {
	tag, err := q.Exec(ctx, o.insertOnce, e.args()...)
	return tag.RowsAffected() == 1, err
}

// List lists the operator log in id order, of projection, action and
// generation when set (not empty, not 0): rows of (id, at, action,
// projection, generation, aggregate, from version, to version, reason,
// actor).
func (o *OpLog) List(ctx context.Context, q querier, projection, action string, generation int, p Page) (pgx.Rows, error) {
	return q.Query(ctx, o.list, projection, p.Aggregate, action, p.Limit, p.AfterID, generation)
}
