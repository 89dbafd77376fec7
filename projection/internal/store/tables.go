package store

import (
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// gateTables are the tables that hold a projection's gate state, keyed by
// the projection's gate key (their projection column). This is the one list
// of them. The parked table, keyed the same way, is package buffer's: a
// caller that clears or counts a gate state does the parked table through
// buffer.
var gateTables = []string{"versions", "applied", "quarantine", "conflicts"}

// Gate is the set of tables that hold a projection's gate state.
type Gate struct {
	tables        []string
	count, delete []string // per table, in the order of tables
}

func newGate(t qualify) Gate {
	g := Gate{tables: gateTables}
	for _, name := range gateTables {
		g.count = append(g.count, `SELECT count(*) FROM `+t(name)+` WHERE projection = $1`)
		g.delete = append(g.delete, `DELETE FROM `+t(name)+` WHERE projection = $1`)
	}
	return g
}

// QueueClear queues the deletion of the gate state of the projection with
// gate key key, table by table; fn, if not nil, receives each table's name
// and the rows deleted from it when the batch is sent.
func (g *Gate) QueueClear(b *pgx.Batch, key string, fn func(table string, deleted int64)) {
	for i, name := range g.tables {
		q := b.Queue(g.delete[i], key)
		if fn != nil {
			q.Exec(func(ct pgconn.CommandTag) error {
				fn(name, ct.RowsAffected())
				return nil
			})
		}
	}
}

// QueueCount queues a count of the gate rows of the projection with gate
// key key, table by table; fn receives each table's name and count when the
// batch is sent.
func (g *Gate) QueueCount(b *pgx.Batch, key string, fn func(table string, n int64)) {
	for i, name := range g.tables {
		b.Queue(g.count[i], key).QueryRow(func(row pgx.Row) error {
			var n int64
			err := row.Scan(&n)
			fn(name, n)
			return err
		})
	}
}
