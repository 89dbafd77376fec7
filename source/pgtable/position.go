package pgtable

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// pos is a row's position: its transaction's id and its seq. Rows are read
// in pos order.
type pos struct {
	tx  uint64
	seq int64
}

func (p pos) less(q pos) bool { return p.tx < q.tx || (p.tx == q.tx && p.seq < q.seq) }

// encode encodes p for the checkpoints table as T:<txid>/S:<seq>, both
// zero-padded to 20 digits: byte order is read order.
func (p pos) encode() projection.Position {
	return projection.Position(fmt.Sprintf("T:%020d/S:%020d", p.tx, p.seq))
}

func decodePos(b projection.Position) (pos, error) {
	var p pos
	if len(b) != 45 {
		return p, fmt.Errorf("not an events-table position: %q", b)
	}
	if _, err := fmt.Sscanf(string(b), "T:%20d/S:%20d", &p.tx, &p.seq); err != nil {
		return p, fmt.Errorf("not an events-table position: %q: %w", b, err)
	}
	return p, nil
}

// row is one row read from the events table.
type row struct {
	pos pos
	ev  aggregate.Event
}

// scanRows reads the rows of a read statement (config.readSQL's fields).
func scanRows(rows pgx.Rows, into []row) ([]row, error) {
	defer rows.Close()
	for rows.Next() {
		var r row
		var tx string
		var data string
		var meta *string
		var at *time.Time
		if err := rows.Scan(&tx, &r.pos.seq, &r.ev.ID, &r.ev.Aggregate, &r.ev.Version, &r.ev.Type, &data, &meta, &at); err != nil {
			return into, err
		}
		n, err := strconv.ParseUint(tx, 10, 64)
		if err != nil {
			return into, fmt.Errorf("pgtable: txid %q: %w", tx, err)
		}
		r.pos.tx = n
		r.ev.Data = []byte(data)
		if meta != nil {
			r.ev.Metadata = []byte(*meta)
		}
		if at != nil {
			r.ev.RecordedAt = *at
		}
		into = append(into, r)
	}
	return into, rows.Err()
}

// read reads up to limit rows of partition part after p.
func (c *config) read(ctx context.Context, q querier, part int, p pos, limit int, into []row) ([]row, error) {
	args := []any{strconv.FormatUint(p.tx, 10), p.seq, limit}
	if c.Partitions > 1 {
		args = append(args, part)
	}
	rows, err := q.Query(ctx, c.readSQL, args...)
	if err != nil {
		return into, fmt.Errorf("pgtable: read %s: %w", c.table, err)
	}
	into, err = scanRows(rows, into)
	if err != nil {
		return into, fmt.Errorf("pgtable: read %s: %w", c.table, err)
	}
	return into, nil
}

// pending reports whether partition part has committed rows after p that
// a read does not see yet (behind the snapshot horizon).
func (c *config) pending(ctx context.Context, q querier, part int, p pos) (bool, error) {
	args := []any{strconv.FormatUint(p.tx, 10), p.seq}
	if c.Partitions > 1 {
		args = append(args, part)
	}
	var ok bool
	if err := q.QueryRow(ctx, c.pendingSQL, args...).Scan(&ok); err != nil {
		return false, fmt.Errorf("pgtable: read %s: %w", c.table, err)
	}
	return ok, nil
}

// end returns the position of partition part's last row.
func (c *config) end(ctx context.Context, q querier, part int) (pos, bool, error) {
	var args []any
	if c.Partitions > 1 {
		args = append(args, part)
	}
	var tx string
	var p pos
	err := q.QueryRow(ctx, c.endSQL, args...).Scan(&tx, &p.seq)
	if err == pgx.ErrNoRows {
		return p, false, nil
	}
	if err != nil {
		return p, false, fmt.Errorf("pgtable: end of %s: %w", c.table, err)
	}
	p.tx, err = strconv.ParseUint(tx, 10, 64)
	return p, err == nil, err
}

// querier is what the source reads with: a pool or a connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}
