package projection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"

	"github.com/inorder/inorder/internal/retry"
)

// This file holds Process: a batch's preparation and the policy that runs
// its attempts (attempt.go) until one commits.

// Process runs one batch through the gate of every projection in a single
// transaction and returns the outcome of each delivery, index-aligned with
// b.Events. When it returns a nil error, every outcome is committed and the
// deliveries may be acknowledged; when it returns an error, the deliveries
// must not be acknowledged: let the source redeliver them, or retry.
//
// If the connection is lost during the commit itself, Process cannot know
// whether the batch committed; it retries, and a batch that had committed
// then comes back as duplicates — the redelivery every source makes anyway.
// That is why an error is always safe to retry.
//
// Transient failures — serialization failures, lost connections, a server
// shutting down, restarting or refusing connections — are retried with
// backoff for up to Config.MaxRetryTime. A handler error is retried
// (Config.MaxAttempts) and, if it persists, the failing event is
// quarantined and the rest of the batch commits. A delivery the database
// refuses to store (an *UnstorableError) is recorded as rejected and the
// rest of the batch commits.
func (p *Processor) Process(ctx context.Context, b Batch) (_ []Result, err error) {
	var results []Result
	var attempts int
	// The span sees the batch as given (the generations it feeds are
	// chosen below) and ends with its attempts and results.
	sb := &batch{Batch: b}
	ctx, span := p.startBatchSpan(ctx, sb)
	defer func() {
		sb.attempts, sb.results = attempts, results
		endBatchSpan(span, sb, err)
	}()
	if p.cfg.OnBatch != nil && !b.DryRun {
		start := time.Now()
		defer func() {
			info := BatchInfo{Source: b.Source, Projections: p.Projections(), Events: len(b.Events), Exclusive: b.Exclusive,
				Duration: time.Since(start), Attempts: attempts, Err: err}
			if err == nil {
				info.Outcomes = map[Outcome]int{}
				for _, r := range results {
					info.Outcomes[r.Outcome]++
				}
			}
			p.cfg.OnBatch(info)
		}()
	}
	// The generations the batch feeds, and its attempts: generations.go.
	results, attempts, err = p.processFed(ctx, b)
	if err != nil {
		return nil, err
	}
	return results, nil
}

// prepare validates and sorts b's deliveries.
func (p *Processor) prepare(b Batch) *batch {
	n := len(b.Events)
	bt := &batch{Batch: b, results: make([]Result, n)}
	backing := make([]Outcome, n*len(p.projs))
	// The valid deliveries' sort keys, sorted before the deliveries are
	// made: a delivery is large (its event by value), and a sort moving
	// them would spend more time copying than comparing.
	type key struct {
		agg     string
		version int64
		idx     int
	}
	keys := make([]key, 0, n)
	for i, e := range b.Events {
		bt.results[i].Projections = backing[i*len(p.projs) : (i+1)*len(p.projs)]
		if err := e.Validate(p.limits()); err != nil {
			bt.reject(i, err)
			bt.rejected = append(bt.rejected, newRejection(b.Source, e, err))
			continue
		}
		keys = append(keys, key{e.Aggregate, e.Version, i})
	}
	for _, r := range b.Rejects {
		bt.rejected = append(bt.rejected, newRejection(b.Source, r.Event, r.Err))
	}
	byKey := func(a, b key) int {
		return cmp.Or(strings.Compare(a.agg, b.agg), cmp.Compare(a.version, b.version), cmp.Compare(a.idx, b.idx))
	}
	if !slices.IsSortedFunc(keys, byKey) {
		slices.SortFunc(keys, byKey)
	}
	bt.valid = make([]delivery, len(keys))
	for j, k := range keys {
		e := b.Events[k.idx]
		bt.valid[j] = delivery{idx: k.idx, ev: e, id: e.StableID(), hash: e.Hash()}
	}
	bt.rejected = dedupeRejections(bt.rejected)
	bt.aggs = distinctAggregates(bt.valid)
	bt.runs = contiguousRuns(bt.valid, len(bt.aggs))
	return bt
}

// deadlocked counts and logs a deadlock that broke one of bt's attempts
// (or, on a fast path, the statement the attempt then redid by the general
// path), with what args add. A batch marked exclusive met another writer of
// its aggregates after all (a rebalance's overlap, an operator's action): its
// next attempts take every lock.
func (p *Processor) deadlocked(ctx context.Context, bt *batch, d deadlock, err error, msg string, args ...any) {
	for _, r := range p.projs {
		r.stats.deadlocks.Add(1)
	}
	p.log.WarnContext(ctx, msg, append([]any{"table", d.table, "statement", d.statement,
		"detail", d.detail, "error", err, "exclusive", bt.Exclusive}, args...)...)
	retried(ctx, "deadlock", err)
	bt.Exclusive = false
}

// run tries bt until an attempt commits, the retry budget is spent or a
// failure cannot be retried.
//
// The first attempt is optimistic (mode.go has the ladder): it writes the
// version rows without reading them when every aggregate's run seems to
// continue where it stands (speculation), else reads them and writes them
// back with a compare-and-set. If another transaction changed one in
// between, the batch is retried with the rows locked up front, which always
// succeeds. A handler that keeps failing, or a database that refuses a
// write, makes the last attempt careful: aggregate by aggregate, under
// savepoints, isolating what fails.
func (p *Processor) run(ctx context.Context, bt *batch) error {
	var (
		handlerFailures int  // attempts a handler failed
		contended       bool // a compare-and-set found a row changed
		refused         bool // the database refused a write outside a handler
		stale           bool // a check found the memory of a version row stale
		backoff         = p.policy.Start()
		transient       int
		committed       bool
		news            rowNews
	)
	// After the batch: the leases its fences found held, if their owners
	// are gone (owner.go).
	defer p.vacate(ctx)
	own := p.owner.begin(ctx, p, bt)
	defer func() { p.owner.end(own, committed, news) }()
	for {
		bt.attempts++
		m := p.mode(bt, handlerFailures, contended, refused)
		var out txResult
		var began, committing bool
		err := p.transaction(ctx, bt.attempts, m, &began, func(ctx context.Context, tx pgx.Tx) error {
			a := &attempt{p: p, tx: tx, bt: bt, mode: m, noMemory: stale, own: own}
			err := a.run(ctx)
			if err != nil && tx.Conn().IsClosed() {
				// The connection went away: whatever the error says (a
				// handler decoding data may fail with io.ErrUnexpectedEOF
				// too), the attempt did not fail for a reason of its own.
				err = &connLost{err}
			}
			out = a.out
			committing = err == nil
			if committing && bt.DryRun {
				return errDryRun
			}
			return err
		})
		if bt.DryRun && errors.Is(err, errDryRun) {
			bt.summarize()
			return nil
		}
		if err != nil && (!began || committing) && !IsTransient(err) && lostAtBoundary(err) {
			// BEGIN or COMMIT failed without an answer from the server
			// ("conn closed", "unexpected EOF"): the connection is gone. A
			// lost COMMIT may have committed; the retry then finds the
			// batch's deliveries done and reports them as duplicates.
			err = &connLost{err}
		}
		if err == nil {
			committed, news = true, out.rows
			p.committed(m, out, contended)
			if p.hasInline() {
				p.rows.update(bt.epoch, bt.aggs, out.rows, len(p.projs), p.cfg.RowCache)
			}
			p.states.update(bt.epoch, out.states, p.cfg.RowCache)
			if n := p.memOff.Load(); n > 0 {
				p.memOff.CompareAndSwap(n, n-1)
			}
			bt.summarize()
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("projection: process batch: %w", errors.Join(ctx.Err(), err))
		}
		var hf *handlerFailure
		switch {
		case errors.Is(err, errStaleMemory):
			// The processor's memory of a version row was stale (another
			// writer moved it): forget the batch's aggregates, read for a
			// while, and retry at once.
			retried(ctx, "stale memory", err)
			p.memoryMisses.Add(1)
			for _, r := range p.projs {
				r.stats.stale.Add(1)
			}
			p.states.update(bt.epoch, p.forgetting(bt.aggs), p.cfg.RowCache)
			p.memOff.Store(memoryOffBatches)
			stale = true
			continue
		case errors.Is(err, errOwnership):
			// The lease moved under the batch (owner.go): begin again with
			// what the owner holds now, at once.
			retried(ctx, "lease moved", err)
			p.owner.end(own, false, rowNews{})
			own = p.owner.begin(ctx, p, bt)
			continue
		case errors.Is(err, errContended) && !m.locked:
			// Writers are competing for the same aggregates: lock up front
			// for a while rather than redo batches.
			retried(ctx, "contended", err)
			contended = true
			p.lockFirst.Store(lockFirstBatches)
			continue
		case IsTransient(err):
			transient++
			ok, werr := backoff.Wait(ctx)
			if werr != nil {
				return fmt.Errorf("projection: process batch: %w", errors.Join(werr, err))
			}
			if !ok {
				return fmt.Errorf("projection: process batch: gave up after %d retries of transient failures over %v: %w",
					transient-1, backoff.Elapsed().Round(time.Millisecond), err)
			}
			if d, ok := asDeadlock(err); ok {
				p.deadlocked(ctx, bt, d, err, "deadlock, retrying batch", "retry", transient)
				continue
			}
			p.log.WarnContext(ctx, "transient failure, retrying batch", "error", err, "retry", transient)
			retried(ctx, "transient", err)
			continue
		case errors.As(err, &hf) && !m.careful:
			handlerFailures++
			p.log.WarnContext(ctx, "handler failed, retrying batch", "projection", hf.projection, "error", hf.err, "attempt", handlerFailures)
			retried(ctx, "handler", err)
		case isRefusal(err) && !m.careful:
			// A write the database refuses (a value it cannot store) fails
			// every attempt alike: go careful at once, so that only what
			// causes it is set aside.
			refused = true
			p.log.WarnContext(ctx, "database refused a write, isolating it", "error", err)
			retried(ctx, "refused", err)
			continue
		default:
			return fmt.Errorf("projection: process batch: %w", err)
		}
		if err := p.sleep(ctx, handlerFailures); err != nil {
			return fmt.Errorf("projection: process batch: %w", err)
		}
	}
}

// lostAtBoundary reports whether err, returned by BEGIN (or by acquiring the
// connection for it) or by COMMIT, means that the connection failed: these
// statements run no code of a handler, so any error that is not the
// server's answer (a *pgconn.PgError), a closed pool or the context's is the
// connection's.
func lostAtBoundary(err error) bool {
	var pgErr *pgconn.PgError
	return !errors.As(err, &pgErr) && !errors.Is(err, puddle.ErrClosedPool) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// sleep waits before the next attempt after n handler failures.
func (p *Processor) sleep(ctx context.Context, n int) error {
	return retry.Sleep(ctx, p.policy.Delay(n))
}

// committed updates the processor's adaptive state and counters after an
// attempt in mode m committed with out.
func (p *Processor) committed(m txMode, out txResult, contended bool) {
	if m.locked && !m.careful && !contended {
		if n := p.lockFirst.Load(); n > 0 {
			p.lockFirst.CompareAndSwap(n, n-1)
		}
	}
	if out.fastPath && !out.misspeculated {
		p.speculated.Add(1)
	}
	switch n := p.noMixed.Load(); {
	case m.mixed && out.misspeculated:
		// Other transactions keep moving the batches' aggregates (competing
		// consumers): general attempts for a while, see txMode.mixed.
		p.noMixed.Store(noMixedBatches)
	case !m.mixed && n > 0:
		p.noMixed.CompareAndSwap(n, n-1)
	}
	switch {
	case out.misspeculated:
		p.noSpeculation.Store(true)
	case out.continues:
		p.noSpeculation.Store(false)
	}
	for i, r := range p.projs {
		r.stats.add(out.tally[i])
	}
}
