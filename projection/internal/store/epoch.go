package store

import "github.com/jackc/pgx/v5"

// Epoch is the generation_epoch table: one counter, moved by every change of
// the generations a processor feeds (a rebuild's start, a switch, a
// rollback, a drop), which tells processors to reload their view of the
// generations and forget the rows they wrote.
type Epoch struct {
	bump, read string
}

func newEpoch(t qualify) Epoch {
	e := t("generation_epoch")
	return Epoch{
		bump: `UPDATE ` + e + ` SET epoch = epoch + 1`,
		read: `SELECT epoch FROM ` + e,
	}
}

// QueueBump queues the move of the epoch.
func (e *Epoch) QueueBump(b *pgx.Batch) *pgx.QueuedQuery { return b.Queue(e.bump) }

// QueueRead queues the read of the epoch: one row of one bigint.
func (e *Epoch) QueueRead(b *pgx.Batch) *pgx.QueuedQuery { return b.Queue(e.read) }
