package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Checkpoints is the checkpoints table: where sources store their position,
// by name, in the transaction of the work it covers or on their own.
type Checkpoints struct {
	save, load, list string
}

func newCheckpoints(t qualify) Checkpoints {
	cp := t("checkpoints")
	return Checkpoints{
		// save never moves a checkpoint back: the row's lock orders
		// concurrent writers, and a smaller position leaves it as it is.
		save: `INSERT INTO ` + cp + ` AS c (name, position) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET position = EXCLUDED.position, updated_at = now()
WHERE c.position < EXCLUDED.position`,
		load: `SELECT position FROM ` + cp + ` WHERE name = $1`,
		list: `SELECT name, position, updated_at, greatest(extract(epoch FROM clock_timestamp() - updated_at), 0)::float8
FROM ` + cp + ` ORDER BY name COLLATE "C"`,
	}
}

// QueueSave queues the write of the position of name (see Save).
func (c *Checkpoints) QueueSave(b *pgx.Batch, name string, position []byte) *pgx.QueuedQuery {
	return b.Queue(c.save, name, position)
}

// Save stores position under name, unless the stored one is already at or
// after it (positions compare as byte strings).
func (c *Checkpoints) Save(ctx context.Context, q querier, name string, position []byte) error {
	_, err := q.Exec(ctx, c.save, name, position)
	return err
}

// Load returns the position stored under name; ok is false when there is
// none.
func (c *Checkpoints) Load(ctx context.Context, q querier, name string) (position []byte, ok bool, err error) {
	err = q.QueryRow(ctx, c.load, name).Scan(&position)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return position, true, nil
}

// Checkpoint is one stored checkpoint as the operator views list it.
type Checkpoint struct {
	Name      string
	Position  []byte
	UpdatedAt time.Time
	// AgeSeconds is the time since UpdatedAt, by the database's clock.
	AgeSeconds float64
}

// QueueList queues a read of every checkpoint, by name in byte order; fn
// receives them when the batch is sent.
func (c *Checkpoints) QueueList(b *pgx.Batch, fn func([]Checkpoint)) {
	b.Queue(c.list).Query(func(rows pgx.Rows) error {
		var out []Checkpoint
		for rows.Next() {
			var cp Checkpoint
			if err := rows.Scan(&cp.Name, &cp.Position, &cp.UpdatedAt, &cp.AgeSeconds); err != nil {
				return err
			}
			out = append(out, cp)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		fn(out)
		return nil
	})
}
