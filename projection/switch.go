package projection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/buffer"
	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the end of a side-by-side rebuild — verification and the
// switch — and the operator actions on generations: rollback and drop.

// notInStep reports that the new generation and the live one are not at
// the same point of the stream yet: verification tries again — after
// reading the stream again, unless only the live generation's workers can
// close the difference (lags).
type notInStep struct {
	why  string
	lags bool
}

func (e *notInStep) Error() string { return "not in step with the live generation: " + e.why }

// verifyAndSwitch verifies the generation and switches it in, retrying
// while it is not in step with the live one (reading the stream again in
// between), up to BuildOptions.VerifyTimeout.
func (b *builder) verifyAndSwitch(ctx context.Context) error {
	if err := b.setPhase(ctx, PhaseVerify, nil); err != nil {
		return err
	}
	deadline := time.Now().Add(b.opts.VerifyTimeout)
	// Until the deadline, which the loop checks itself.
	bo := retry.Policy{Initial: 20 * time.Millisecond, Max: time.Second, MaxElapsed: -1}.Start()
	for {
		prev, err := b.p.trySwitch(ctx, b)
		if err == nil {
			b.res.Previous = prev
			b.phase = PhaseSwitch
			b.report(true, fmt.Sprintf("generation %d is live", b.gen.Generation))
			b.p.log.InfoContext(ctx, "rebuild switched", "projection", b.r.name, "generation", b.gen.Generation, "previous", prev)
			return nil
		}
		var nis *notInStep
		var verr *VerificationError
		switch {
		case errors.As(err, &verr):
			if ferr := b.p.setFailed(ctx, b.gen, strings.Join(verr.Problems, "; ")); ferr != nil {
				return errors.Join(err, ferr)
			}
			return err
		case errors.As(err, &nis) && time.Now().Before(deadline) && nis.lags:
			b.note(fmt.Sprintf("verify: %v; waiting for them", nis))
		case errors.As(err, &nis) && time.Now().Before(deadline):
			b.note(fmt.Sprintf("verify: %v; reading the stream again", nis))
		case errors.As(err, &nis):
			verr := &VerificationError{Projection: b.r.name, Generation: b.gen.Generation,
				Problems: []string{fmt.Sprintf("%v after %v", nis, b.opts.VerifyTimeout)}}
			if ferr := b.p.setFailed(ctx, b.gen, verr.Problems[0]); ferr != nil {
				return errors.Join(verr, ferr)
			}
			return verr
		case IsTransient(err) && ctx.Err() == nil:
			b.note(fmt.Sprintf("verify: %v; trying again", err))
		default:
			return err
		}
		if _, err := bo.Wait(ctx); err != nil {
			return err
		}
		if nis != nil && nis.lags {
			// Reading the stream again would not help: the workers feed
			// both generations, and the new one already has what they
			// have yet to deliver. It would only load them.
			continue
		}
		if _, err := b.catchUpPass(ctx); err != nil {
			return err
		}
	}
}

// trySwitch checks the builder's generation and, if it passes, switches it
// in, in one REPEATABLE READ transaction. It returns the generation that
// was live.
func (p *Processor) trySwitch(ctx context.Context, b *builder) (previous int, err error) {
	name := b.r.name
	err = pgx.BeginTxFunc(ctx, p.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		rows, err := p.store.Generations.LockFed(ctx, tx, name)
		if err != nil {
			return err
		}
		gens := generationsOf(rows)
		var live, g *Generation
		for i := range gens {
			switch {
			case gens[i].State == StateLive:
				live = &gens[i]
			case gens[i].Key == b.gen.Key:
				g = &gens[i]
			}
		}
		if g == nil || g.State != StateCatchUp {
			return fmt.Errorf("generation %d is no longer in catch-up", b.gen.Generation)
		}
		if live == nil {
			return errors.New("the projection has no live generation")
		}
		previous = live.Generation
		if err := b.setPhaseTx(ctx, tx, PhaseVerify); err != nil {
			return err
		}
		problems, err := p.verify(ctx, tx, b, live, g)
		if err != nil {
			return err
		}
		if len(problems) > 0 {
			return &VerificationError{Projection: name, Generation: g.Generation, Problems: problems}
		}
		bb := &pgx.Batch{}
		p.store.Generations.QueueSwitch(bb, name, g.Key, b.opts.Retention)
		p.store.Epoch.QueueBump(bb)
		p.store.OpLog.Queue(bb, store.OpEntry{Action: "rebuild-switch", Projection: name, Generation: g.Generation,
			From: int64(live.Generation), To: int64(g.Generation),
			Reason: fmt.Sprintf("generation %d (code version %d) live; generation %d (code version %d) previous", g.Generation, g.CodeVersion,
				live.Generation, live.CodeVersion), Actor: b.opts.By})
		return tx.SendBatch(ctx, bb).Close()
	})
	return previous, err
}

// setPhaseTx records the builder's phase in tx.
func (b *builder) setPhaseTx(ctx context.Context, tx pgx.Tx, phase string) error {
	return b.p.store.Generations.SetPhase(ctx, tx, b.gen.Key, phase)
}

// verify runs the checks of generation g against the live one, in tx: the
// problems found, a *notInStep while the two are not at the same point of
// the stream, or an error.
func (p *Processor) verify(ctx context.Context, tx pgx.Tx, b *builder, live, g *Generation) ([]string, error) {
	var problems []string
	var parked int64
	quarantined, err := p.store.Quarantine.Unmatched(ctx, tx, g.Key, live.Key)
	if err != nil {
		return nil, fmt.Errorf("compare gate state: %w", err)
	}
	pb := &pgx.Batch{}
	p.buf.QueueUnmatched(pb, g.Key, live.Key, func(n int64) { parked = n })
	if err := tx.SendBatch(ctx, pb).Close(); err != nil {
		return nil, fmt.Errorf("compare gate state: %w", err)
	}
	if quarantined > 0 {
		problems = append(problems, fmt.Sprintf("%d events quarantined that the live generation does not have quarantined (inorder quarantine list --projection %s shows the live ones; the new generation's are under projection %q)",
			quarantined, g.Projection, g.Key))
	}
	if verify := describe(b.r.p).Verify; verify != nil {
		err := inSchema(ctx, tx, g.Schema, func() error { return verify(ctx, tx) })
		if err != nil {
			if IsTransient(err) || ctx.Err() != nil {
				return nil, err
			}
			problems = append(problems, "Verify: "+err.Error())
		}
	}
	if len(problems) > 0 {
		return problems, nil
	}
	// Where each generation is, per aggregate. An inline projection's
	// versions are its rows' (inline_views.go).
	behind, ahead, err := p.store.Versions.Compare(ctx, tx, g.Key, refOf(inlineTableIn(b.r.p, g.Schema)),
		live.Key, refOf(inlineTableIn(b.r.p, live.Schema)))
	if err != nil {
		return nil, fmt.Errorf("compare versions: %w", err)
	}
	// The new generation must hold every version the live one applied:
	// readers must not see an aggregate go back, and the switch must not
	// leave behind what workers of another code version delivered to the
	// live one only. Being ahead is no harm in itself — what the rebuild
	// read and lagging workers have not delivered yet, or versions parked
	// beyond where both are, which wait for the same predecessors.
	if behind > 0 {
		return nil, &notInStep{why: fmt.Sprintf("%d aggregates behind the live generation", behind)}
	}
	if g.CodeVersion != live.CodeVersion || b.opts.ExpectChanges {
		return nil, nil
	}
	// A repair rebuild: the same code must give the same read model, once
	// both generations applied the same versions. From the replay's end on,
	// both are fed by the same transactions (catchUpPass); what the new one
	// has more is what the replay read and the workers have not delivered
	// to the live one yet: one lag, not a stream that must go quiet.
	if ahead > 0 {
		return nil, &notInStep{why: fmt.Sprintf("the live generation lags: %d aggregates ahead of it (events up to the replay's end that its workers have not delivered yet)", ahead), lags: true}
	}
	if parked > 0 {
		return nil, &notInStep{why: fmt.Sprintf("%d events parked that the live generation has not parked", parked)}
	}
	// An inline projection's log is gate state, which batches of other
	// sizes leave longer or shorter: not content.
	var skip [2]string
	if it := inlineTableIn(b.r.p, ""); it != nil {
		skip = [2]string{it.Table[len(it.Table)-1], it.Log}
	}
	return p.compareContent(ctx, tx, g, live, skip)
}

// volatileDefault matches the default expressions of columns that the
// database fills at write time, which differ between generations with the
// same content: timestamps, sequences, random values.
const volatileDefault = `(now\(|current_timestamp|clock_timestamp|statement_timestamp|transaction_timestamp|localtime|current_time|current_date|nextval\(|random\(|gen_random_uuid|uuid_generate)`

// compareContent compares every table of g's schema with the table of the
// same name of the live generation: row count and an order-independent
// checksum of the rows, over the columns the projection writes (identity,
// generated and columns with volatile defaults left out).
//
// skip names a table and a column of it that is left out too.
func (p *Processor) compareContent(ctx context.Context, tx pgx.Tx, g, live *Generation, skip [2]string) ([]string, error) {
	tables, err := userTables(ctx, tx, g.Schema, "")
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, t := range tables {
		newTable := pgx.Identifier{g.Schema, t}.Sanitize()
		oldTable := pgx.Identifier{t}.Sanitize()
		if live.Schema != "" {
			oldTable = pgx.Identifier{live.Schema, t}.Sanitize()
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, oldTable).Scan(&exists); err != nil {
			return nil, err
		}
		if !exists {
			problems = append(problems, fmt.Sprintf("table %s: not in the live generation", t))
			continue
		}
		rows, err := tx.Query(ctx, `SELECT quote_ident(a.attname) FROM pg_attribute a
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attidentity = '' AND a.attgenerated = ''
  AND (d.adbin IS NULL OR pg_get_expr(d.adbin, d.adrelid) !~* $2)
  AND NOT ($3 AND a.attname = $4)
ORDER BY a.attnum`, newTable, volatileDefault, t == skip[0], skip[1])
		if err != nil {
			return nil, err
		}
		cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		if len(cols) == 0 {
			continue
		}
		sum := func(table string) (n int64, sum string, err error) {
			err = tx.QueryRow(ctx, `SELECT count(*), coalesce(sum(('x' || left(md5(ROW(`+strings.Join(cols, ", ")+`)::text), 16))::bit(64)::bigint::numeric), 0)::text
FROM `+table).Scan(&n, &sum)
			return n, sum, err
		}
		nn, ns, err := sum(newTable)
		if err != nil {
			return nil, fmt.Errorf("checksum %s: %w", newTable, err)
		}
		// The live table may lack a column: then it differs.
		sp, err := tx.Begin(ctx)
		if err != nil {
			return nil, err
		}
		on, os, err := sum(oldTable)
		if err != nil {
			_ = sp.Rollback(ctx)
			problems = append(problems, fmt.Sprintf("table %s: cannot be compared with the live one: %v", t, err))
			continue
		}
		if err := sp.Commit(ctx); err != nil {
			return nil, err
		}
		if nn != on || ns != os {
			problems = append(problems, fmt.Sprintf("table %s: %d rows (checksum %s) in generation %d, %d rows (checksum %s) in the live generation %d",
				t, nn, ns, g.Generation, on, os, live.Generation))
		}
	}
	return problems, nil
}

// setFailed marks a generation failed with the reason, and moves the
// epoch on: nobody feeds it any more.
func (p *Processor) setFailed(ctx context.Context, g Generation, reason string) error {
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		p.store.Generations.QueueFail(b, g.Key, reason)
		p.store.Epoch.QueueBump(b)
		p.store.OpLog.Queue(b, store.OpEntry{Action: "rebuild-failed", Projection: g.Projection, Generation: g.Generation,
			To: int64(g.Generation), Reason: reason})
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("mark generation %d failed: %w", g.Generation, err)
	}
	p.log.WarnContext(ctx, "rebuild: generation failed", "projection", g.Projection, "generation", g.Generation, "reason", reason)
	return nil
}

// Rollback makes a projection's previous generation live again, and the
// live one previous (still fed, until the previous one's retention
// ends): one transaction, so readers move from one to the other at once.
// The previous generation is exact only while processors of its code
// version feed it. The report's Generation is the generation live after it
// (Before and After: the live generation before and after); ErrNoPrevious
// when there is none (retired or dropped). opts.Generation is ignored.
func (p *Processor) Rollback(ctx context.Context, projection string, opts *ActionOptions) (ActionReport, error) {
	o := opts.orZero()
	rep := ActionReport{Action: "rebuild-rollback", Projection: projection, DryRun: o.DryRun, By: o.By, Reason: o.Reason}
	if _, ok := p.byName[projection]; !ok {
		return rep, fmt.Errorf("%w: %q", ErrUnknownProjection, projection)
	}
	if _, err := p.feeding(ctx); err != nil {
		return rep, err
	}
	err := pgx.BeginTxFunc(ctx, p.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		live, prev, keep, err := p.store.Generations.LockLive(ctx, tx, projection)
		if err != nil {
			return err
		}
		if prev == 0 {
			return ErrNoPrevious
		}
		b := &pgx.Batch{}
		p.store.Generations.QueueRollback(b, projection, live, prev, keep)
		p.store.Epoch.QueueBump(b)
		p.store.OpLog.Queue(b, store.OpEntry{Action: "rebuild-rollback", Projection: projection, Generation: prev,
			From: int64(live), To: int64(prev), Reason: cmp.Or(o.Reason, fmt.Sprintf("generation %d live again; generation %d previous", prev, live)), Actor: o.By})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		rep.Generation, rep.Before, rep.After, rep.Changed = prev, int64(live), int64(prev), true
		rep.Message = fmt.Sprintf("generation %d of %s live again; generation %d previous", prev, projection, live)
		return dryRunEnd(o)
	})
	if err = settled(err); err != nil {
		return rep, fmt.Errorf("projection %s: rollback: %w", projection, err)
	}
	return rep, nil
}

// DropGeneration drops a generation that is not live: its schema (or, for
// generation 1, whose tables are in the connection's search_path, their
// rows, through the projection's Tables.Reset) and its gate rows. A generation
// being built can be dropped only while no Build runs (else
// ErrBuildInProgress). The generation is opts.Generation: 0 is the live
// one, which is refused (ErrLiveGeneration). Dropping a dropped generation
// does nothing (ActionReport.Changed is false). A dry run counts what would
// go (ActionReport.Deleted) and changes nothing, the generation's state
// included.
func (p *Processor) DropGeneration(ctx context.Context, projection string, opts *ActionOptions) (ActionReport, error) {
	o := opts.orZero()
	generation := o.Generation
	rep := ActionReport{Action: "rebuild-drop", Projection: projection, Generation: generation, DryRun: o.DryRun, By: o.By, Reason: o.Reason}
	r, ok := p.byName[projection]
	if !ok {
		return rep, fmt.Errorf("%w: %q", ErrUnknownProjection, projection)
	}
	gens, err := p.Generations(ctx, projection)
	if err != nil {
		return rep, err
	}
	for _, g := range gens {
		if g.Generation != generation && (generation != 0 || g.State != StateLive) {
			continue
		}
		rep.Generation = g.Generation
		switch g.State {
		case StateLive:
			return rep, fmt.Errorf("projection %s: drop generation %d: %w", projection, g.Generation, ErrLiveGeneration)
		case StateDropped:
			rep.Message = fmt.Sprintf("generation %d of %s is dropped already: nothing to do", g.Generation, projection)
			return rep, nil
		case StateBuilding, StateCatchUp:
			// Only while nobody builds it: hold the build lock meanwhile.
			conn, err := p.pool.Acquire(ctx)
			if err != nil {
				return rep, err
			}
			defer conn.Release()
			b := &builder{p: p, r: r, conn: conn}
			var ok bool
			if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, b.lockKey()).Scan(&ok); err != nil {
				return rep, err
			}
			if !ok {
				return rep, fmt.Errorf("projection %s: drop generation %d: %w", projection, g.Generation, ErrBuildInProgress)
			}
			defer b.unlock(ctx)
		}
		if o.DryRun {
			return p.dropPreview(ctx, rep, g)
		}
		rep.Deleted, err = p.dropGeneration(ctx, r, g, o)
		if err != nil {
			return rep, err
		}
		rep.Changed = true
		rep.Message = fmt.Sprintf("generation %d of %s (code version %d, was %s) dropped", g.Generation, projection, g.CodeVersion, g.State)
		return rep, nil
	}
	return rep, fmt.Errorf("projection %s: %w: %d", projection, ErrNoGeneration, generation)
}

// dropPreview reports what dropping g would delete: its gate rows per
// table, its parked events and its read-model tables.
func (p *Processor) dropPreview(ctx context.Context, rep ActionReport, g Generation) (ActionReport, error) {
	rep.Deleted = map[string]int64{}
	err := p.snapshot(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		p.store.Gate.QueueCount(b, g.Key, func(table string, n int64) { rep.Deleted[table] = n })
		if g.Schema != "" {
			b.Queue(`SELECT count(*) FROM pg_tables WHERE schemaname = $1`, g.Schema).QueryRow(func(row pgx.Row) error {
				var n int64
				err := row.Scan(&n)
				rep.Deleted["tables"] = n
				return err
			})
		}
		rep.Deleted["parked"] = 0
		p.buf.QueueStats(b, []string{g.Key}, func(ps []buffer.Stats) {
			for _, s := range ps {
				rep.Deleted["parked"] += s.Events
			}
		})
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return rep, fmt.Errorf("projection %s: drop generation %d: %w", g.Projection, g.Generation, err)
	}
	where := "its tables in schema " + g.Schema
	if g.Schema == "" {
		where = "the rows of its tables (generation 1: in the connection's search_path, through the projection's Reset)"
	}
	rep.Message = fmt.Sprintf("would drop generation %d of %s (code version %d, %s): %s and its gate rows",
		g.Generation, g.Projection, g.CodeVersion, g.State, where)
	return rep, nil
}

// dropGeneration drops g: first it stops being fed (its own transaction,
// moving the epoch on), then its tables and gate rows go. It returns the
// rows deleted per gate table.
func (p *Processor) dropGeneration(ctx context.Context, r *registered, g Generation, o ActionOptions) (map[string]int64, error) {
	deleted := map[string]int64{}
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		p.store.Generations.QueueRetire(b, g.Key)
		p.store.Epoch.QueueBump(b)
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, fmt.Errorf("projection %s: drop generation %d: %w", g.Projection, g.Generation, err)
	}
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		p.store.Gate.QueueClear(b, g.Key, func(table string, n int64) { deleted[table] = n })
		p.buf.QueueClear(b, g.Key)
		p.store.Generations.QueueDropped(b, g.Key)
		p.store.OpLog.Queue(b, store.OpEntry{Action: "rebuild-drop", Projection: g.Projection, Generation: g.Generation,
			To: int64(g.Generation), Reason: cmp.Or(o.Reason, fmt.Sprintf("generation %d (code version %d, was %s) dropped", g.Generation, g.CodeVersion, g.State)), Actor: o.By})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if g.Schema != "" {
			_, err := tx.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{g.Schema}.Sanitize()+` CASCADE`)
			return err
		}
		if rs, ok := r.p.(Tables); ok {
			return rs.Reset(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("projection %s: drop generation %d: %w", g.Projection, g.Generation, err)
	}
	p.log.InfoContext(ctx, "generation dropped", "projection", g.Projection, "generation", g.Generation, "by", o.By)
	return deleted, nil
}
