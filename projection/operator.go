package projection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/buffer"
)

// RetryQuarantined applies the quarantined event of an aggregate again —
// once the fault behind it is fixed — and then drains the aggregate's parked
// successors. If the event fails again it stays quarantined (its attempts
// and error are updated) and the returned error is a *HandlerError.
func (p *Processor) RetryQuarantined(ctx context.Context, projection, agg string) error {
	return p.operate(ctx, projection, agg, "retry", "", func(st *aggState, q *candidate) (*candidate, int64, int64, error) {
		if !st.blocked || q == nil {
			return nil, 0, 0, ErrNotQuarantined
		}
		st.blocked = false
		return q, st.version, q.ev.Version, nil
	})
}

// SkipQuarantined advances an aggregate past its quarantined event without
// applying it, records the decision and reason in the operator log, and
// drains the parked successors.
func (p *Processor) SkipQuarantined(ctx context.Context, projection, agg, reason string) error {
	return p.operate(ctx, projection, agg, "skip", reason, func(st *aggState, q *candidate) (*candidate, int64, int64, error) {
		if !st.blocked || q == nil {
			return nil, 0, 0, ErrNotQuarantined
		}
		from := st.version
		st.blocked = false
		st.version = q.ev.Version
		q.origin = fromQuarantine
		return nil, from, q.ev.Version, nil
	})
}

// DeclareGap records that versions current+1 … to of an aggregate do not
// exist (deleted or truncated at the source), advances past them, and drains
// the parked successors. to must not reach a parked version.
func (p *Processor) DeclareGap(ctx context.Context, projection, agg string, to int64, reason string) error {
	return p.operate(ctx, projection, agg, "declare-gap", reason, func(st *aggState, _ *candidate) (*candidate, int64, int64, error) {
		if st.blocked {
			return nil, 0, 0, ErrQuarantined
		}
		if to <= st.version {
			return nil, 0, 0, fmt.Errorf("%w: version %d is already applied (at %d)", ErrBadGap, to, st.version)
		}
		from := st.version
		st.version = to
		return nil, from, to, nil
	})
}

// operate runs an operator action on one aggregate under its version lock:
// mutate decides the new state (and may return an event to apply first),
// then the aggregate's parked successors are drained under savepoints.
func (p *Processor) operate(ctx context.Context, projection, agg, action, reason string,
	mutate func(st *aggState, q *candidate) (apply *candidate, from, to int64, err error)) error {
	// The action is on the live generation: its gate key, its schema.
	r, err := p.liveTarget(ctx, projection)
	if err != nil {
		return err
	}
	key := r.key // the gate rows' projection column
	var retryErr error
	var drained int64
	txFunc := func(tx pgx.Tx) error {
		retryErr, drained = nil, 0
		if p.pauseLock {
			// Wait for a rebuild of the projection, as Process does.
			if _, err := tx.Exec(ctx, p.sql.pauseShared, r.lockKey); err != nil {
				return fmt.Errorf("pause lock: %w", err)
			}
		}
		var st aggState
		if err := tx.QueryRow(ctx, p.sql.lockOne, key, agg).Scan(&st.version, &st.parked, &st.blocked); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("%w: aggregate %q has no state", ErrNotFound, agg)
			}
			return fmt.Errorf("lock version: %w", err)
		}
		it := r.inlineTable()
		var row inlineRow
		if it != nil {
			// An inline projection's row, after the version row: its
			// version is the later of the two (see inline_gate.go).
			var lerr error
			if row, lerr = lockInlineOne(ctx, tx, r, agg); lerr != nil {
				return lerr
			}
			st.version = max(st.version, row.version)
		}
		var q *candidate
		if st.blocked {
			c := candidate{idx: -1, origin: fromQuarantine}
			err := tx.QueryRow(ctx, p.sql.loadQuarantine, key, agg).Scan(&c.ev.Version, &c.id, &c.hash, &c.ev.Type, &c.ev.Data, &c.ev.Metadata)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("load quarantine: %w", err)
			}
			if err == nil {
				c.ev.Aggregate, c.ev.ID = agg, c.id
				q = &c
			}
		}
		before := st
		first, from, to, err := mutate(&st, q)
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		var parked []buffer.Parked
		p.buf.QueueLoad(b, key, []string{agg}, func(ps []buffer.Parked) { parked = ps })
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if action == "declare-gap" && len(parked) > 0 && parked[0].Version <= to {
			return fmt.Errorf("%w: version %d is parked; declare the gap up to %d at most", ErrBadGap, parked[0].Version, parked[0].Version-1)
		}
		if gh, ok := r.p.(GapHandler); ok && (action == "declare-gap" || action == "skip") {
			// The projection learns of the hole before the versions after
			// it are applied.
			ht := newTx(tx, r.name)
			r.enterSchema(ht)
			if err := gh.Gap(ctx, ht, Gap{Aggregate: agg, From: from + 1, To: to, Action: action, Reason: reason}); err != nil {
				return &HandlerError{Projection: projection, Aggregate: agg, Version: to, Err: fmt.Errorf("gap %d-%d: %w", from+1, to, err)}
			}
			r.leaveSchema(ht)
			if err := ht.Flush(ctx); err != nil {
				return &HandlerError{Projection: projection, Aggregate: agg, Version: to, Err: fmt.Errorf("gap %d-%d: %w", from+1, to, err)}
			}
		}
		prepared := it != nil && row.found && (row.version < st.version || row.marked())
		if prepared {
			// The row catches up with a gap, and its mark is cleared, before
			// the run applies; the writes below mark it again if they must.
			if _, err := tx.Exec(ctx, r.inlineSQL().prepare, []string{agg}, []int64{st.version}); err != nil {
				return fmt.Errorf("prepare inline row: %w", err)
			}
		}
		pl := &aggPlan{agg: agg, before: st, attempts: 1}
		var cands []candidate
		if first != nil {
			cands = append(cands, *first)
		}
		for _, e := range parked {
			cands = append(cands, candidate{ev: e.Event, id: e.StableID(), hash: e.Hash, idx: -1, origin: fromParked})
		}
		for len(pl.run) < len(cands) && cands[len(pl.run)].ev.Version == st.version+int64(len(pl.run))+1 {
			pl.run = append(pl.run, cands[len(pl.run)])
		}
		pl.cut = len(pl.run)
		if len(pl.run) > 0 {
			if err := p.applyCarefully(ctx, tx, r, pl); err != nil {
				return err
			}
		}
		if first != nil && pl.cut == 0 {
			retryErr = pl.err
			var herr *HandlerError
			if !errors.As(pl.err, &herr) { // wrap once: applying already names the event
				retryErr = &HandlerError{Projection: projection, Aggregate: agg, Version: first.ev.Version, Err: pl.err}
			}
		}
		var tally counts
		wb := &pgx.Batch{}
		if action == "skip" {
			// Before queueWrites: a parked successor that fails while it
			// drains is quarantined by an upsert that must survive.
			wb.Queue(p.sql.deleteQuarantine, key, agg)
		}
		pl.written = pl.after() // written below, whatever the plan says
		after := pl.after()
		// The version row's log starts anew at the new version (an operator
		// may skip versions, which a log cannot hold), so this action's
		// applied entries go to the applied table, after the old log's.
		wb.Queue(p.sql.spillAll, key, agg)
		if action == "skip" && q != nil {
			// The skipped event holds its version in the applied log, so
			// its redeliveries are duplicates, not conflicts.
			wb.Queue(p.sql.insertApplied, key, []string{agg}, []int64{q.ev.Version}, []string{q.id}, [][]byte{q.hash})
		}
		wb.Queue(p.sql.resetVersion, key, agg, after.version, after.parked, after.blocked)
		w := gateWrites{r: r, plans: []*aggPlan{pl}, tally: &tally}
		if it != nil {
			if mark, change := markChange(pl, row, row.found, prepared); change {
				w.markAggs, w.marks = []string{agg}, []bool{mark}
			}
		}
		p.queueWrites(wb, w)
		wb.Queue(p.sql.operatorLog, action, projection, agg, from, to, reason)
		if err := tx.SendBatch(ctx, wb).Close(); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		p.log.InfoContext(ctx, "operator action", "action", action, "projection", projection, "aggregate", agg,
			"from", from, "to", to, "before", before.version, "after", after.version, "drained", tally.drained)
		drained = tally.drained
		return nil
	}
	backoff := p.policy.Start()
	for {
		err := pgx.BeginFunc(ctx, p.pool, txFunc)
		if err == nil {
			r.stats.drained.Add(drained)
			return retryErr
		}
		if !IsTransient(err) || ctx.Err() != nil {
			return fmt.Errorf("projection %s: %s %s: %w", projection, action, agg, err)
		}
		p.log.WarnContext(ctx, "transient failure, retrying operator action", "action", action, "error", err, "retry", backoff.Retries()+1)
		ok, werr := backoff.Wait(ctx)
		if werr != nil || !ok {
			return fmt.Errorf("projection %s: %s %s: gave up retrying after %v: %w", projection, action, agg,
				backoff.Elapsed().Round(time.Millisecond), errors.Join(werr, err))
		}
	}
}

// ReplayRejected feeds the rejected event with the given id through the
// processor again — after the fault that made it invalid was fixed (a raised
// payload limit, a newly accepted type) — and marks it replayed. If it is
// still invalid, it stays rejected and its *aggregate.ValidationError is
// returned.
func (p *Processor) ReplayRejected(ctx context.Context, id int64) (Result, error) {
	var e aggregate.Event
	var source string
	var rawID, rawAgg, rawType []byte
	err := p.pool.QueryRow(ctx, `SELECT source, event_id, aggregate, version, type, coalesce(data, ''), metadata,
  raw_event_id, raw_aggregate, raw_type FROM `+p.table("rejected")+` WHERE id = $1`, id).
		Scan(&source, &e.ID, &e.Aggregate, &e.Version, &e.Type, &e.Data, &e.Metadata, &rawID, &rawAgg, &rawType)
	// The text columns hold an escaped form when the delivery's bytes were
	// not valid text; the raw columns hold the bytes themselves.
	if rawID != nil {
		e.ID = string(rawID)
	}
	if rawAgg != nil {
		e.Aggregate = string(rawAgg)
	}
	if rawType != nil {
		e.Type = string(rawType)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return Result{}, fmt.Errorf("%w: rejected event %d", ErrNotFound, id)
	}
	if err != nil {
		return Result{}, fmt.Errorf("projection: load rejected event %d: %w", id, err)
	}
	res, err := p.Process(ctx, Batch{Events: []aggregate.Event{e}, Source: source, BeforeCommit: func(ctx context.Context, tx pgx.Tx) error {
		if err := e.Validate(&p.cfg.Limits); err != nil {
			return nil
		}
		b := &pgx.Batch{}
		b.Queue(`UPDATE `+p.table("rejected")+` SET replayed_at = now() WHERE id = $1`, id)
		b.Queue(p.sql.operatorLog, "replay-rejected", "", e.Aggregate, e.Version, e.Version, fmt.Sprintf("rejected event %d", id))
		return tx.SendBatch(ctx, b).Close()
	}})
	if err != nil {
		return Result{}, err
	}
	return res[0], res[0].Err
}

// Action is an entry for the operator log (see Processor.LogAction).
type Action struct {
	// Action names what was done or found, e.g. "gap-missing-at-source".
	Action     string
	Projection string
	Aggregate  string
	// From and To are the versions concerned, if any.
	From, To *int64
	Reason   string
	// Once records the entry only if no entry with the same action,
	// projection, aggregate and versions exists: for findings a source
	// makes again each time it looks.
	Once bool
}

// LogAction records a into the operator log, where operators read every
// decision and finding (Processor.OperatorLog). It reports whether an entry
// was written (false when a.Once found one already).
func (p *Processor) LogAction(ctx context.Context, a Action) (bool, error) {
	if a.Action == "" {
		return false, errors.New("projection: log action: empty action")
	}
	ol := p.table("operator_log")
	sql := `INSERT INTO ` + ol + ` (action, projection, aggregate, from_version, to_version, reason)
SELECT $1, $2, $3, $4, $5, $6`
	if a.Once {
		sql += ` WHERE NOT EXISTS (SELECT 1 FROM ` + ol + ` WHERE action = $1 AND projection = $2 AND aggregate = $3
  AND from_version IS NOT DISTINCT FROM $4 AND to_version IS NOT DISTINCT FROM $5)`
	}
	var written bool
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if a.Once {
			// Two processes making the same finding at once must not both
			// see it unrecorded.
			key := fmt.Sprintf("inorder.oplog\x00%s\x00%s\x00%s\x00%s\x00%v\x00%v", p.cfg.Schema, a.Action, a.Projection, a.Aggregate,
				ptrValue(a.From), ptrValue(a.To))
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, advisoryKey64(key)); err != nil {
				return err
			}
		}
		tag, err := tx.Exec(ctx, sql, a.Action, a.Projection, a.Aggregate, a.From, a.To, a.Reason)
		written = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("projection: log action %s: %w", a.Action, err)
	}
	return written, nil
}

// AckConflict acknowledges the recorded conflict with the given id: it stays
// listed (Conflicts) but no longer counts as open (ProjectionStatus), and
// the decision is written to the operator log. Acknowledging an
// acknowledged conflict changes nothing; an unknown id wraps ErrNotFound.
func (p *Processor) AckConflict(ctx context.Context, id int64, reason string) error {
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var proj, agg string
		var version int64
		var already bool
		err := tx.QueryRow(ctx, `SELECT projection, aggregate, version, acked_at IS NOT NULL FROM `+p.table("conflicts")+`
WHERE id = $1 FOR UPDATE`, id).Scan(&proj, &agg, &version, &already)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: conflict %d", ErrNotFound, id)
		}
		if err != nil || already {
			return err
		}
		b := &pgx.Batch{}
		b.Queue(`UPDATE `+p.table("conflicts")+` SET acked_at = now(), ack_reason = $2 WHERE id = $1`, id, reason)
		b.Queue(p.sql.operatorLog, "ack-conflict", proj, agg, version, version, cmp.Or(reason, fmt.Sprintf("conflict %d", id)))
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return fmt.Errorf("projection: ack conflict %d: %w", id, err)
	}
	return nil
}

func ptrValue(v *int64) any {
	if v == nil {
		return "-"
	}
	return *v
}
