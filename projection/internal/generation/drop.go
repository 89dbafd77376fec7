package generation

import (
	"cmp"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/buffer"
	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the operator actions on generations that are not a
// rebuild's: rollback and drop (projection.Processor.Rollback and
// DropGeneration, which document them and report them).

// Rollback makes the projection's previous generation live again and the
// live one previous, in one transaction, whose last step is end (a dry
// run's end fails, rolling it back). It returns the generations live
// before and after once the change is made in the transaction (zero
// before); Errors.NoPrevious without a previous generation.
func Rollback(ctx context.Context, env *Env, projection, by, reason string, end func() error) (live, previous int, err error) {
	st := env.Store
	err = pgx.BeginTxFunc(ctx, env.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		l, prev, keep, err := st.Generations.LockLive(ctx, tx, projection)
		if err != nil {
			return err
		}
		if prev == 0 {
			return env.Errors.NoPrevious
		}
		b := &pgx.Batch{}
		st.Generations.QueueRollback(b, projection, l, prev, keep)
		st.Epoch.QueueBump(b)
		st.OpLog.Queue(b, store.OpEntry{Action: "rebuild-rollback", Projection: projection, Generation: prev,
			From: int64(l), To: int64(prev), Reason: cmp.Or(reason, fmt.Sprintf("generation %d live again; generation %d previous", prev, l)), Actor: by})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		live, previous = l, prev
		return end()
	})
	return live, previous, err
}

// Preview counts what dropping g would delete — its gate rows per table,
// its parked events ("parked") and its read-model tables ("tables") — in
// one snapshot.
func Preview(ctx context.Context, env *Env, g store.Generation) (map[string]int64, error) {
	deleted := map[string]int64{}
	opts := pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	err := pgx.BeginTxFunc(ctx, env.Pool, opts, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		env.Store.Gate.QueueCount(b, g.Key, func(table string, n int64) { deleted[table] = n })
		if g.Schema != "" {
			b.Queue(`SELECT count(*) FROM pg_tables WHERE schemaname = $1`, g.Schema).QueryRow(func(row pgx.Row) error {
				var n int64
				err := row.Scan(&n)
				deleted["tables"] = n
				return err
			})
		}
		deleted["parked"] = 0
		env.Buffer.QueueStats(b, []string{g.Key}, func(ps []buffer.Stats) {
			for _, s := range ps {
				deleted["parked"] += s.Events
			}
		})
		return tx.SendBatch(ctx, b).Close()
	})
	return deleted, err
}

// Drop drops generation g of the projection: first it stops being fed (its
// own transaction, moving the epoch on), then its tables (its schema; for
// generation 1, whose tables are in the connection's search_path, their
// rows, through the projection's Tables.Reset) and its gate rows go, and
// the drop is recorded, by by, for reason (default: what was dropped). It
// returns the rows deleted per gate table.
func Drop(ctx context.Context, env *Env, proj Projection, g store.Generation, by, reason string) (map[string]int64, error) {
	st := env.Store
	deleted := map[string]int64{}
	err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		st.Generations.QueueRetire(b, g.Key)
		st.Epoch.QueueBump(b)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, fmt.Errorf("projection %s: drop generation %d: %w", g.Projection, g.Generation, err)
	}
	err = pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		st.Gate.QueueClear(b, g.Key, func(table string, n int64) { deleted[table] = n })
		env.Buffer.QueueClear(b, g.Key)
		st.Generations.QueueDropped(b, g.Key)
		st.OpLog.Queue(b, store.OpEntry{Action: "rebuild-drop", Projection: g.Projection, Generation: g.Generation,
			To: int64(g.Generation), Reason: cmp.Or(reason, fmt.Sprintf("generation %d (code version %d, was %s) dropped", g.Generation, g.CodeVersion, g.State)), Actor: by})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if g.Schema != "" {
			_, err := tx.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{g.Schema}.Sanitize()+` CASCADE`)
			return err
		}
		if rs := proj.Gate.Tables(); rs != nil {
			return rs.Reset(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("projection %s: drop generation %d: %w", g.Projection, g.Generation, err)
	}
	env.Log.InfoContext(ctx, "generation dropped", "projection", g.Projection, "generation", g.Generation, "by", by)
	return deleted, nil
}
