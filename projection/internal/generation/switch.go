package generation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the end of a side-by-side rebuild: verification and the
// switch, and the marking of a generation that failed.

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
// between), up to Options.VerifyTimeout.
func (b *builder) verifyAndSwitch(ctx context.Context) error {
	if err := b.setPhase(ctx, PhaseVerify, nil); err != nil {
		return err
	}
	deadline := time.Now().Add(b.opts.VerifyTimeout)
	// Until the deadline, which the loop checks itself.
	bo := retry.Policy{Initial: 20 * time.Millisecond, Max: time.Second, MaxElapsed: -1}.Start()
	for {
		prev, err := b.trySwitch(ctx)
		if err == nil {
			b.res.Previous = prev
			b.phase = PhaseSwitch
			b.report(true, fmt.Sprintf("generation %d is live", b.gen.Generation))
			b.env.Log.InfoContext(ctx, "rebuild switched", "projection", b.proj.Name, "generation", b.gen.Generation, "previous", prev)
			return nil
		}
		var nis *notInStep
		var verr *VerificationError
		switch {
		case errors.As(err, &verr):
			if ferr := setFailed(ctx, b.env, b.gen, strings.Join(verr.Problems, "; ")); ferr != nil {
				verr.Also = ferr
			}
			return verr
		case errors.As(err, &nis) && time.Now().Before(deadline) && nis.lags:
			b.note(fmt.Sprintf("verify: %v; waiting for them", nis))
		case errors.As(err, &nis) && time.Now().Before(deadline):
			b.note(fmt.Sprintf("verify: %v; reading the stream again", nis))
		case errors.As(err, &nis):
			verr := &VerificationError{Projection: b.proj.Name, Generation: b.gen.Generation,
				Problems: []string{fmt.Sprintf("%v after %v", nis, b.opts.VerifyTimeout)}}
			if ferr := setFailed(ctx, b.env, b.gen, verr.Problems[0]); ferr != nil {
				verr.Also = ferr
			}
			return verr
		case b.proj.Gate.Transient(err) && ctx.Err() == nil:
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
func (b *builder) trySwitch(ctx context.Context) (previous int, err error) {
	name, st := b.proj.Name, b.env.Store
	err = pgx.BeginTxFunc(ctx, b.env.Pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		gens, err := st.Generations.LockFed(ctx, tx, name)
		if err != nil {
			return err
		}
		var live, g *store.Generation
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
		if err := st.Generations.SetPhase(ctx, tx, b.gen.Key, PhaseVerify); err != nil {
			return err
		}
		problems, err := b.verify(ctx, tx, live, g)
		if err != nil {
			return err
		}
		if len(problems) > 0 {
			return &VerificationError{Projection: name, Generation: g.Generation, Problems: problems}
		}
		bb := &pgx.Batch{}
		st.Generations.QueueSwitch(bb, name, g.Key, b.opts.Retention)
		st.Epoch.QueueBump(bb)
		st.OpLog.Queue(bb, store.OpEntry{Action: "rebuild-switch", Projection: name, Generation: g.Generation,
			From: int64(live.Generation), To: int64(g.Generation),
			Reason: fmt.Sprintf("generation %d (code version %d) live; generation %d (code version %d) previous", g.Generation, g.CodeVersion,
				live.Generation, live.CodeVersion), Actor: b.opts.By})
		return tx.SendBatch(ctx, bb).Close()
	})
	return previous, err
}

// verify runs the checks of generation g against the live one, in tx: the
// problems found, a *notInStep while the two are not at the same point of
// the stream, or an error.
func (b *builder) verify(ctx context.Context, tx pgx.Tx, live, g *store.Generation) ([]string, error) {
	st, gate := b.env.Store, b.proj.Gate
	var problems []string
	var parked int64
	quarantined, err := st.Quarantine.Unmatched(ctx, tx, g.Key, live.Key)
	if err != nil {
		return nil, fmt.Errorf("compare gate state: %w", err)
	}
	pb := &pgx.Batch{}
	b.env.Buffer.QueueUnmatched(pb, g.Key, live.Key, func(n int64) { parked = n })
	if err := tx.SendBatch(ctx, pb).Close(); err != nil {
		return nil, fmt.Errorf("compare gate state: %w", err)
	}
	if quarantined > 0 {
		problems = append(problems, fmt.Sprintf("%d events quarantined that the live generation does not have quarantined (inorder quarantine list --projection %s shows the live ones; the new generation's are under projection %q)",
			quarantined, g.Projection, g.Key))
	}
	if verify := gate.Verify(); verify != nil {
		err := InSchema(ctx, tx, g.Schema, func() error { return verify(ctx, tx) })
		if err != nil {
			if gate.Transient(err) || ctx.Err() != nil {
				return nil, err
			}
			problems = append(problems, "Verify: "+err.Error())
		}
	}
	if len(problems) > 0 {
		return problems, nil
	}
	// Where each generation is, per aggregate. An inline projection's
	// versions are its rows'.
	behind, ahead, err := st.Versions.Compare(ctx, tx, g.Key, inlineRef(gate.Inline(g.Schema)), live.Key, inlineRef(gate.Inline(live.Schema)))
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
	if it := gate.Inline(""); it != nil {
		skip = [2]string{it.Name, it.Log}
	}
	return compareContent(ctx, tx, g, live, skip)
}

// inlineRef returns t's ref, nil for a projection without an inline table.
func inlineRef(t *InlineTable) *store.InlineRef {
	if t == nil {
		return nil
	}
	return &t.Ref
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
func compareContent(ctx context.Context, tx pgx.Tx, g, live *store.Generation, skip [2]string) ([]string, error) {
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
func setFailed(ctx context.Context, env *Env, g store.Generation, reason string) error {
	err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		env.Store.Generations.QueueFail(b, g.Key, reason)
		env.Store.Epoch.QueueBump(b)
		env.Store.OpLog.Queue(b, store.OpEntry{Action: "rebuild-failed", Projection: g.Projection, Generation: g.Generation,
			To: int64(g.Generation), Reason: reason})
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("mark generation %d failed: %w", g.Generation, err)
	}
	env.Log.WarnContext(ctx, "rebuild: generation failed", "projection", g.Projection, "generation", g.Generation, "reason", reason)
	return nil
}
