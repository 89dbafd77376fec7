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
	"github.com/inorder/inorder/projection/internal/store"
)

// RetryQuarantined applies the quarantined event of an aggregate again —
// once the fault behind it is fixed — and then drains the aggregate's parked
// successors, in the generation opts names (default the live one). If the
// event fails again it stays quarantined (its attempts and error are
// updated) and the returned error is a *HandlerError, with the report.
func (p *Processor) RetryQuarantined(ctx context.Context, projection, agg string, opts *ActionOptions) (ActionReport, error) {
	return p.operate(ctx, projection, agg, "retry", opts.orZero(), func(st *aggState, q *candidate) (*candidate, int64, int64, error) {
		if !st.blocked || q == nil {
			return nil, 0, 0, ErrNotQuarantined
		}
		st.blocked = false
		return q, st.version, q.ev.Version, nil
	})
}

// SkipQuarantined advances an aggregate past its quarantined event without
// applying it, records the decision and opts.Reason in the operator log, and
// drains the parked successors.
func (p *Processor) SkipQuarantined(ctx context.Context, projection, agg string, opts *ActionOptions) (ActionReport, error) {
	return p.operate(ctx, projection, agg, "skip", opts.orZero(), func(st *aggState, q *candidate) (*candidate, int64, int64, error) {
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
// the parked successors. to must not reach a parked version. The rejected
// deliveries of those versions (an event the source holds but nothing can
// apply) are resolved with it: nothing else is waiting for them.
func (p *Processor) DeclareGap(ctx context.Context, projection, agg string, to int64, opts *ActionOptions) (ActionReport, error) {
	return p.operate(ctx, projection, agg, "declare-gap", opts.orZero(), func(st *aggState, _ *candidate) (*candidate, int64, int64, error) {
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
// then the aggregate's parked successors are drained under savepoints. A
// transient failure runs the whole transaction again, with backoff.
func (p *Processor) operate(ctx context.Context, projection, agg, action string, o ActionOptions,
	mutate func(st *aggState, q *candidate) (apply *candidate, from, to int64, err error)) (ActionReport, error) {
	// The generation acted on: its gate key, its schema, its handler.
	r, err := p.target(ctx, projection, o.Generation)
	if err != nil {
		return ActionReport{Action: action, Projection: projection, Generation: o.Generation, Aggregate: agg, DryRun: o.DryRun}, err
	}
	op := &operation{p: p, r: r, projection: projection, agg: agg, action: action, o: o, mutate: mutate}
	backoff := p.policy.Start()
	for {
		err := settled(pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error { return op.run(ctx, tx) }))
		if err == nil {
			if !o.DryRun {
				r.stats.drained.Add(op.rep.Drained)
			}
			return op.rep, op.retryErr
		}
		fail := ActionReport{Action: action, Projection: projection, Generation: r.generation, Aggregate: agg, DryRun: o.DryRun}
		if !IsTransient(err) || ctx.Err() != nil {
			return fail, fmt.Errorf("projection %s: %s %s: %w", projection, action, agg, err)
		}
		p.log.WarnContext(ctx, "transient failure, retrying operator action", "action", action, "error", err, "retry", backoff.Retries()+1)
		ok, werr := backoff.Wait(ctx)
		if werr != nil || !ok {
			return fail, fmt.Errorf("projection %s: %s %s: gave up retrying after %v: %w", projection, action, agg,
				backoff.Elapsed().Round(time.Millisecond), errors.Join(werr, err))
		}
	}
}

// operation is one operator action on one aggregate (Processor.operate);
// run is one attempt of its transaction, which sets rep and retryErr.
type operation struct {
	p                       *Processor
	r                       *registered
	projection, agg, action string
	o                       ActionOptions
	mutate                  func(st *aggState, q *candidate) (apply *candidate, from, to int64, err error)

	rep      ActionReport
	retryErr error // the event the action applies first failed: nothing changed
}

func (op *operation) run(ctx context.Context, tx pgx.Tx) error {
	p, r, agg, action := op.p, op.r, op.agg, op.action
	op.retryErr = nil
	op.rep = ActionReport{Action: action, Projection: op.projection, Generation: r.generation, Aggregate: agg,
		DryRun: op.o.DryRun, By: op.o.By, Reason: op.o.Reason}
	st, row, q, err := op.lock(ctx, tx)
	if err != nil {
		return err
	}
	before := st
	op.rep.Before, op.rep.After = st.version, st.version
	first, from, to, err := op.mutate(&st, q)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	var parked []buffer.Parked
	p.buf.QueueLoad(b, r.key, []string{agg}, func(ps []buffer.Parked) { parked = ps })
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if action == "declare-gap" && len(parked) > 0 && parked[0].Version <= to {
		return fmt.Errorf("%w: version %d is parked; declare the gap up to %d at most", ErrBadGap, parked[0].Version, parked[0].Version-1)
	}
	if err := op.gap(ctx, tx, from, to); err != nil {
		return err
	}
	it := r.inlineTable()
	prepared := it != nil && row.found && (row.version < st.version || row.marked())
	if prepared {
		// The row catches up with a gap, and its mark is cleared, before
		// the run applies; the writes below mark it again if they must.
		if _, err := tx.Exec(ctx, r.inlineSQL().prepare, []string{agg}, []int64{st.version}); err != nil {
			return fmt.Errorf("prepare inline row: %w", err)
		}
	}
	pl, err := op.drain(ctx, tx, st, first, parked)
	if err != nil {
		return err
	}
	var tally counts
	after, err := op.write(ctx, tx, pl, q, row, prepared, from, to, &tally)
	if err != nil {
		return err
	}
	op.rep.After, op.rep.Drained, op.rep.Changed = after.version, tally.drained, op.retryErr == nil
	op.rep.Message = actionMessage(action, from, to, tally.drained, op.retryErr)
	p.log.InfoContext(ctx, "operator action", "action", action, "projection", op.projection, "generation", r.generation,
		"aggregate", agg, "from", from, "to", to, "before", before.version, "after", after.version, "drained", tally.drained,
		"resolved", len(op.rep.Resolved), "by", op.o.By, "dry_run", op.o.DryRun)
	return dryRunEnd(op.o)
}

// lock takes the aggregate's version lock (after the projection's pause
// lock, as Process does) and reads its state: its version row, an inline
// projection's row (whose version is the later of the two, see
// inline_gate.go), and its quarantined event if it is blocked.
func (op *operation) lock(ctx context.Context, tx pgx.Tx) (st aggState, row inlineRow, q *candidate, err error) {
	p, r, key, agg := op.p, op.r, op.r.key, op.agg
	if p.pauseLock {
		if err := p.store.Locks.Shared(ctx, tx, r.lockKey); err != nil {
			return st, row, nil, fmt.Errorf("pause lock: %w", err)
		}
	}
	if r.inlineTable() != nil {
		// Another writer than the key's owner, if it has one (owner.go).
		if err := p.fenceForeign(ctx, tx, key); err != nil {
			return st, row, nil, err
		}
	}
	created := false
	if err := p.store.Versions.LockOne(ctx, tx, key, agg).Scan(&st.version, &st.parked, &st.blocked); err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			return st, row, nil, fmt.Errorf("lock version: %w", err)
		}
		if r.inlineTable() == nil {
			return st, row, nil, fmt.Errorf("%w: aggregate %q has no state", ErrNotFound, agg)
		}
		// An owner's aggregate has its row and no version row (owner.go):
		// the action gives it the empty one every other inline aggregate
		// has, in the gate's lock order (the version row first). With no
		// row either, there is no state, and the error rolls it back.
		if st, err = lockNew(ctx, tx, p, key, agg); err != nil {
			return st, row, nil, err
		}
		created = true
	}
	if r.inlineTable() != nil {
		if row, err = lockInlineOne(ctx, tx, r, agg); err != nil {
			return st, row, nil, err
		}
		if created && !row.found {
			return st, row, nil, fmt.Errorf("%w: aggregate %q has no state", ErrNotFound, agg)
		}
		st.version = max(st.version, row.version)
	}
	if st.blocked {
		c := candidate{idx: -1, origin: fromQuarantine}
		err := p.store.Quarantine.Load(ctx, tx, key, agg).Scan(&c.ev.Version, &c.id, &c.hash, &c.ev.Type, &c.ev.Data, &c.ev.Metadata)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return st, row, nil, fmt.Errorf("load quarantine: %w", err)
		}
		if err == nil {
			c.ev.Aggregate, c.ev.ID = agg, c.id
			q = &c
		}
	}
	return st, row, q, nil
}

// lockNew creates agg's missing version row, empty, and locks it.
func lockNew(ctx context.Context, tx pgx.Tx, p *Processor, key, agg string) (aggState, error) {
	var st aggState
	rows, err := p.store.Versions.Lock(ctx, tx, key, []string{agg})
	if err != nil {
		return st, fmt.Errorf("lock version: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var a string
		if err := rows.Scan(&a, &st.version, &st.parked, &st.blocked, &st.rev); err != nil {
			return st, fmt.Errorf("lock version: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("lock version: %w", err)
	}
	return st, nil
}

// gap tells a projection with a Description.Gap of the versions
// from+1…to that a declare-gap or a skip passes, before the versions after
// them apply.
func (op *operation) gap(ctx context.Context, tx pgx.Tx, from, to int64) error {
	gap := describe(op.r.p).Gap
	if gap == nil || (op.action != "declare-gap" && op.action != "skip") {
		return nil
	}
	ht := newTx(tx, op.r.name)
	op.r.enterSchema(ht)
	if err := gap(ctx, ht, Gap{Aggregate: op.agg, From: from + 1, To: to, Action: op.action, Reason: op.o.Reason}); err != nil {
		return &HandlerError{Projection: op.projection, Aggregate: op.agg, Version: to, Err: fmt.Errorf("gap %d-%d: %w", from+1, to, err)}
	}
	ht.finish()
	op.r.leaveSchema(ht)
	if err := ht.Flush(ctx); err != nil {
		return &HandlerError{Projection: op.projection, Aggregate: op.agg, Version: to, Err: fmt.Errorf("gap %d-%d: %w", from+1, to, err)}
	}
	return nil
}

// drain applies, under savepoints, the event the action applies first (if
// any) and the parked successors that follow the new version without a
// gap. When the first event fails, retryErr says why.
func (op *operation) drain(ctx context.Context, tx pgx.Tx, st aggState, first *candidate, parked []buffer.Parked) (*aggPlan, error) {
	pl := &aggPlan{agg: op.agg, before: st, attempts: 1}
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
		if err := op.p.applyCarefully(ctx, tx, op.r, pl); err != nil {
			return nil, err
		}
	}
	if first != nil && pl.cut == 0 {
		op.retryErr = pl.err
		var herr *HandlerError
		if !errors.As(pl.err, &herr) { // wrap once: applying already names the event
			op.retryErr = &HandlerError{Projection: op.projection, Aggregate: op.agg, Version: first.ev.Version, Err: pl.err}
		}
	}
	return pl, nil
}

// write writes the aggregate's gate state after the action and the drain
// — its version row (with a new log), the applied entries, an inline row's
// mark, the rejected deliveries a passed gap resolves and the operator
// log's entry — and returns that state.
func (op *operation) write(ctx context.Context, tx pgx.Tx, pl *aggPlan, q *candidate, row inlineRow, prepared bool, from, to int64, tally *counts) (aggState, error) {
	p, r, key, agg, action := op.p, op.r, op.r.key, op.agg, op.action
	wb := &pgx.Batch{}
	if action == "skip" {
		// Before queueWrites: a parked successor that fails while it
		// drains is quarantined by an upsert that must survive.
		p.store.Quarantine.QueueDelete(wb, key, agg)
	}
	pl.written = pl.after() // written below, whatever the plan says
	after := pl.after()
	// The version row's log starts anew at the new version (an operator
	// may skip versions, which a log cannot hold), so this action's
	// applied entries go to the applied table, after the old log's.
	p.store.Applied.QueueSpillAll(wb, key, agg)
	if action == "skip" && q != nil {
		// The skipped event holds its version in the applied log, so
		// its redeliveries are duplicates, not conflicts.
		p.store.Applied.QueueInsert(wb, key, []string{agg}, []int64{q.ev.Version}, []string{q.id}, [][]byte{q.hash})
	}
	p.store.Versions.QueueReset(wb, key, agg, after.version, after.parked, after.blocked)
	w := gateWrites{r: r, plans: []*aggPlan{pl}, tally: tally}
	if r.inlineTable() != nil {
		if mark, change := markChange(pl, row, row.found, prepared); change {
			w.markAggs, w.marks = []string{agg}, []bool{mark}
		}
	}
	p.queueWrites(wb, w)
	if action == "declare-gap" || action == "skip" {
		// The versions passed without applying anything: their rejected
		// deliveries wait for nothing any more.
		p.queueResolveRejected(wb, agg, from+1, to, "declared-gap", op.o,
			fmt.Sprintf("%s in %s generation %d: %s", action, op.projection, r.generation, op.o.Reason), &op.rep.Resolved)
	}
	p.store.OpLog.Queue(wb, store.OpEntry{Action: action, Projection: op.projection, Generation: r.generation, Aggregate: agg,
		From: from, To: to, Reason: op.o.Reason, Actor: op.o.By})
	if err := tx.SendBatch(ctx, wb).Close(); err != nil {
		return after, fmt.Errorf("write: %w", err)
	}
	return after, nil
}

// actionMessage says in a sentence what an action on an aggregate did.
func actionMessage(action string, from, to, drained int64, retryErr error) string {
	var what string
	switch {
	case retryErr != nil:
		return fmt.Sprintf("the quarantined event (version %d) failed again and stays quarantined", to)
	case action == "retry":
		what = fmt.Sprintf("quarantined event (version %d) applied", to)
	case action == "skip":
		what = fmt.Sprintf("quarantined event (version %d) skipped", to)
	case from+1 == to:
		what = fmt.Sprintf("version %d declared missing", to)
	default:
		what = fmt.Sprintf("versions %d-%d declared missing", from+1, to)
	}
	if drained > 0 {
		what += fmt.Sprintf(", %d parked events applied behind it", drained)
	}
	return what
}

// queueResolveRejected queues the resolution of the pending rejected
// deliveries of versions from … to of an aggregate; their ids are appended
// to ids.
func (p *Processor) queueResolveRejected(b *pgx.Batch, agg string, from, to int64, resolution string, o ActionOptions, reason string, ids *[]int64) {
	p.store.Rejected.QueueResolveVersions(b, agg, from, to, store.Resolution{Resolution: resolution, By: o.By, Reason: reason}).Query(func(rows pgx.Rows) error {
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		*ids = append(*ids, got...)
		return err
	})
}

// ReplayRejected feeds the rejected delivery with the given id through the
// processor again — after the fault that made it invalid was fixed (a raised
// payload limit, a newly accepted type) — and marks it resolved ("replayed").
// It is validated first as it was delivered, content type included: if it is
// still invalid it stays pending, its reason and error become this
// validation's, nothing is counted as a new delivery, and its
// *aggregate.ValidationError is returned with the report.
func (p *Processor) ReplayRejected(ctx context.Context, id int64, opts *ActionOptions) (ActionReport, error) {
	o := opts.orZero()
	rep := ActionReport{Action: "replay-rejected", ID: id, DryRun: o.DryRun, By: o.By, Reason: o.Reason}
	var e aggregate.Event
	var source string
	var rawID, rawAgg, rawType []byte
	err := p.store.Rejected.Load(ctx, p.pool, id).
		Scan(&source, &e.ID, &e.Aggregate, &e.Version, &e.Type, &e.Data, &e.Metadata, &rawID, &rawAgg, &rawType, &e.ContentType)
	if errors.Is(err, pgx.ErrNoRows) {
		return rep, fmt.Errorf("%w: rejected event %d", ErrNotFound, id)
	}
	if err != nil {
		return rep, fmt.Errorf("projection: load rejected event %d: %w", id, err)
	}
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
	rep.Aggregate = e.Aggregate
	if verr := e.Validate(p.limits()); verr != nil {
		rep.Message = "still invalid, stays rejected: " + verr.Error()
		if !o.DryRun {
			reason, _ := escapeText(aggregate.Reason(verr))
			text, _ := escapeText(verr.Error())
			if err := p.store.Rejected.SetReason(ctx, p.pool, id, reason, text); err != nil {
				return rep, fmt.Errorf("projection: rejected event %d: %w", id, err)
			}
		}
		return rep, verr
	}
	res, err := p.Process(ctx, Batch{Events: []aggregate.Event{e}, Source: source, DryRun: o.DryRun,
		BeforeCommit: func(ctx context.Context, tx pgx.Tx) error {
			// Resolved, unless the database refused to store it again in
			// this transaction (an UnstorableError: the careful path set it
			// aside as rejected, which moved last_seen to now()).
			return p.store.Rejected.Replayed(ctx, tx, id, store.Resolution{By: o.By, Reason: o.Reason}, e.Aggregate, e.Version,
				cmp.Or(o.Reason, fmt.Sprintf("rejected event %d", id)))
		}})
	if err != nil {
		return rep, err
	}
	rep.Outcomes = map[string]string{}
	for i, name := range p.Projections() {
		rep.Outcomes[name] = res[0].Projections[i].String()
	}
	rep.Changed = true
	rep.Message = fmt.Sprintf("rejected event %d replayed: %s", id, res[0].Outcome)
	p.log.InfoContext(ctx, "operator action", "action", rep.Action, "id", id, "aggregate", e.Aggregate, "version", e.Version,
		"outcome", res[0].Outcome.String(), "by", o.By, "dry_run", o.DryRun)
	return rep, res[0].Err
}

// DismissRejected resolves the rejected delivery with the given id without
// replaying it ("dismissed"): an operator decided that nothing will ever
// apply it. It stays listed, no longer counts as pending (Status,
// inorder_rejected_pending), and a new delivery of the same event does not
// reopen it. Dismissing a resolved delivery changes nothing
// (ActionReport.Changed is false); an unknown id wraps ErrNotFound.
func (p *Processor) DismissRejected(ctx context.Context, id int64, opts *ActionOptions) (ActionReport, error) {
	o := opts.orZero()
	rep := ActionReport{Action: "dismiss-rejected", ID: id, DryRun: o.DryRun, By: o.By, Reason: o.Reason}
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var agg string
		var version int64
		var resolution string
		var resolved bool
		err := p.store.Rejected.Lock(ctx, tx, id).Scan(&agg, &version, &resolution, &resolved)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: rejected event %d", ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		rep.Aggregate, rep.Before, rep.After = agg, version, version
		if resolved {
			rep.Message = fmt.Sprintf("rejected event %d is resolved already (%s): nothing to do", id, resolution)
			return nil
		}
		b := &pgx.Batch{}
		p.store.Rejected.QueueDismiss(b, id, o.By, o.Reason)
		p.store.OpLog.Queue(b, store.OpEntry{Action: "dismiss-rejected", Aggregate: agg, From: version, To: version,
			Reason: cmp.Or(o.Reason, fmt.Sprintf("rejected event %d", id)), Actor: o.By})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		rep.Changed = true
		rep.Message = fmt.Sprintf("rejected event %d dismissed", id)
		return dryRunEnd(o)
	})
	if err = settled(err); err != nil {
		return rep, fmt.Errorf("projection: dismiss rejected event %d: %w", id, err)
	}
	return rep, nil
}

// LogAction records a into the operator log, where operators read every
// decision and finding (Processor.OperatorLog). It reports whether an entry
// was written (false when a.Once found one already).
func (p *Processor) LogAction(ctx context.Context, a Action) (bool, error) {
	if a.Action == "" {
		return false, errors.New("projection: log action: empty action")
	}
	e := store.OpEntry{Action: a.Action, Projection: a.Projection, Generation: a.Generation, Aggregate: a.Aggregate,
		From: a.From, To: a.To, Reason: a.Reason, Actor: a.By}
	var written bool
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if a.Once {
			// Two processes making the same finding at once must not both
			// see it unrecorded.
			key := fmt.Sprintf("inorder.oplog\x00%s\x00%s\x00%s\x00%d\x00%s\x00%v\x00%v", p.cfg.Schema, a.Action, a.Projection,
				a.Generation, a.Aggregate, ptrValue(a.From), ptrValue(a.To))
			if err := p.store.Locks.Exclusive(ctx, tx, advisoryKey64(key)); err != nil {
				return err
			}
			var err error
			written, err = p.store.OpLog.InsertOnce(ctx, tx, e)
			return err
		}
		err := p.store.OpLog.Insert(ctx, tx, e)
		written = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("projection: log action %s: %w", a.Action, err)
	}
	return written, nil
}

// AckConflict acknowledges the recorded conflict with the given id: it stays
// listed (Conflicts) but no longer counts as open (ProjectionStatus), and
// the decision is written to the operator log with opts.Reason and opts.By.
// Acknowledging an acknowledged conflict changes nothing
// (ActionReport.Changed is false); an unknown id wraps ErrNotFound.
func (p *Processor) AckConflict(ctx context.Context, id int64, opts *ActionOptions) (ActionReport, error) {
	o := opts.orZero()
	rep := ActionReport{Action: "ack-conflict", ID: id, DryRun: o.DryRun, By: o.By, Reason: o.Reason}
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var key, agg string
		var version int64
		var already bool
		err := p.store.Conflicts.Lock(ctx, tx, id).Scan(&key, &agg, &version, &already)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: conflict %d", ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		rep.Projection, rep.Generation = p.keyRef(key)
		rep.Aggregate, rep.Before, rep.After = agg, version, version
		if already {
			rep.Message = fmt.Sprintf("conflict %d is acknowledged already: nothing to do", id)
			return nil
		}
		b := &pgx.Batch{}
		p.store.Conflicts.QueueAck(b, id, o.Reason)
		p.store.OpLog.Queue(b, store.OpEntry{Action: "ack-conflict", Projection: rep.Projection, Generation: rep.Generation, Aggregate: agg,
			From: version, To: version, Reason: cmp.Or(o.Reason, fmt.Sprintf("conflict %d", id)), Actor: o.By})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		rep.Changed = true
		rep.Message = fmt.Sprintf("conflict %d acknowledged", id)
		return dryRunEnd(o)
	})
	if err = settled(err); err != nil {
		return rep, fmt.Errorf("projection: ack conflict %d: %w", id, err)
	}
	return rep, nil
}

// keyRef returns the projection and generation of a gate key: one of the
// processor's projections and its generation, or, for a key of no
// projection of the processor's, the key itself and 0.
func (p *Processor) keyRef(key string) (string, int) {
	for name := range p.byName {
		if n := keyGeneration(name, key); n > 0 {
			return name, n
		}
	}
	return key, 0
}

func ptrValue(v *int64) any {
	if v == nil {
		return "-"
	}
	return *v
}
