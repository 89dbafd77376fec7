package generation

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file holds the finalization of a side-by-side rebuild's replay
// (Build, phase 2; replay.go has the replay and its model): the journal
// becomes version rows and applied log, once per aggregate.

// finalize writes the generation's gate state from the journal, makes its
// tables logged, drops the replay's tables and moves the generation to
// catch-up, in one transaction.
func (b *builder) finalize(ctx context.Context) error {
	if err := b.setPhase(ctx, PhaseFinalize, nil); err != nil {
		return err
	}
	st := b.env.Store
	q := func(t string) string { return pgx.Identifier{b.gen.Schema, t}.Sanitize() }
	err := pgx.BeginFunc(ctx, b.conn, func(tx pgx.Tx) error {
		var pos []byte
		var at *time.Time
		var events int64
		if err := tx.QueryRow(ctx, `SELECT position, position_time, events FROM `+q(replayStateTable)).Scan(&pos, &at, &events); err != nil {
			return fmt.Errorf("read the replay's position: %w", err)
		}
		if err := b.writeGateState(ctx, tx, q(replayLogTable)); err != nil {
			return err
		}
		unlogged, err := userTables(ctx, tx, b.gen.Schema, "u")
		if err != nil {
			return err
		}
		for _, t := range unlogged {
			if _, err := tx.Exec(ctx, `ALTER TABLE `+q(t)+` SET LOGGED`); err != nil {
				return fmt.Errorf("make %s logged: %w", t, err)
			}
		}
		bb := &pgx.Batch{}
		bb.Queue(`DROP TABLE ` + q(replayLogTable) + `, ` + q(replayStateTable))
		st.Generations.QueueFinalize(bb, b.gen.Key, pos, at, events)
		st.Epoch.QueueBump(bb)
		if err := tx.SendBatch(ctx, bb).Close(); err != nil {
			return err
		}
		b.gen.Position = pos
		if at != nil {
			b.gen.PositionTime = *at
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("finalize the replay: %w", err)
	}
	b.gen.State = StateCatchUp
	return nil
}

// writeGateState writes, from the journal, the version row of every
// aggregate the replay applied and the gate did not take — its last
// version, and its log's current page — and the applied log of the
// earlier pages (package store has the layout). One sort of the journal
// does both.
//
// An inline projection's rows hold the versions and logs (see replay): it
// gets a version row per row, at the row's version, with an empty log — one
// statement over its table (every aggregate that has a row has a version
// row, as live, for the views that list aggregates).
func (b *builder) writeGateState(ctx context.Context, tx pgx.Tx, journal string) error {
	st := b.env.Store
	if t := b.proj.Gate.Inline(b.gen.Schema); t != nil {
		if err := st.Versions.SeedInline(ctx, tx, b.gen.Key, t.Ref); err != nil {
			return fmt.Errorf("write the version rows: %w", err)
		}
		return nil
	}
	if err := st.SeedFromJournal(ctx, tx, b.gen.Key, journal); err != nil {
		return fmt.Errorf("write the version rows: %w", err)
	}
	return nil
}
