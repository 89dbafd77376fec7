package projection

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file holds generations as the gate sees them: which generations of
// its projections a processor feeds (its "view", cached per generation
// epoch) and the check every batch transaction starts with (queueFedCheck:
// the shared rebuild locks and the epoch) — all the live batch's path has
// of the rebuild, besides the lookup of its view (feeding).
// genlive.go has the live generation that readers and operator actions
// use, gennames.go the generations' gate keys and schemas. The doc.go
// section "Generations" has the model; package internal/generation (the
// rebuild, over build.go, switch.go and gengate.go) changes generations.

// codeVersion returns p's code version.
func codeVersion(p Projection) int {
	return max(describe(p).Version, 1)
}

// errEpochChanged reports that the generations processors feed changed
// since a batch's registrations were chosen: the batch starts again with
// fresh ones.
var errEpochChanged = errors.New("projection: the generations to feed changed")

// ErrNotFed reports an operator action on a generation that the processor
// does not feed: its projection's code version is not the generation's, or
// nothing feeds the generation any more (failed, retired, dropped) or yet
// (being built).
var ErrNotFed = errors.New("the generation is not fed by this processor")

// genRow is a generation as the view needs it.
type genRow struct {
	projection  string
	generation  int
	codeVersion int
	key, schema string
	state       string
	keepUntil   time.Time
}

// genCache holds the view of a processor that follows the generations
// table (processors made by New).
type genCache struct {
	mu   sync.Mutex // one load at a time
	view atomic.Pointer[genView]
	// stats are the counts of the generations fed that Result.Projections
	// does not report, by key.
	statsMu sync.Mutex
	stats   map[string]*counters
	// warned remembers the projections warned about feeding nothing.
	warned sync.Map
}

// genView is what a processor feeds in one generation epoch.
type genView struct {
	epoch int64 // 0: no check (fixed registrations)
	// proc runs the batches: the processor itself when it feeds exactly
	// generation 1 of each projection, else a processor with one
	// registration per generation fed, in key order (the lock order).
	proc *Processor
	// report maps each projection of the processor (by index) to the
	// index in proc.projs of the registration Result.Projections reports
	// for it — its live generation if fed, else the one in catch-up, else
	// the previous one — or -1 when it feeds none. nil: the identity.
	report []int
	// live holds the registration of each projection's live generation,
	// when this processor feeds it.
	live map[string]*registered
	// rows holds the live generation of each projection.
	rows map[string]genRow
	// expires is when a previous generation's retention ends (zero:
	// never): the view is loaded again then, and the generation retired.
	expires time.Time
}

func (gv *genView) fresh() bool {
	return gv != nil && (gv.expires.IsZero() || time.Now().Before(gv.expires))
}

// results returns the batch's results as Process reports them: per
// projection of p, the outcome of the generation the view reports.
func (gv *genView) results(p *Processor, bt *batch) []Result {
	if gv.report == nil {
		return bt.results
	}
	backing := make([]Outcome, len(bt.results)*len(p.projs))
	for i := range bt.results {
		res := &bt.results[i]
		outs := backing[i*len(p.projs) : (i+1)*len(p.projs)]
		o := Outcome(0)
		for j, k := range gv.report {
			if k >= 0 {
				outs[j] = res.Projections[k]
			} else if res.Err != nil {
				outs[j] = Rejected // rejected before any projection
			}
			if outs[j].severity() > o.severity() {
				o = outs[j]
			}
		}
		res.Projections, res.Outcome = outs, o
	}
	return bt.results
}

// processFed runs b through the generations the processor feeds: the
// body of Process. It returns the results and the attempts made.
func (p *Processor) processFed(ctx context.Context, b Batch) ([]Result, int, error) {
	attempts := 0
	for {
		gv, err := p.feeding(ctx)
		if err != nil {
			return nil, max(attempts, 1), err // a try that failed
		}
		bt := gv.proc.prepare(b)
		bt.epoch = gv.epoch
		err = gv.proc.run(ctx, bt)
		attempts += bt.attempts
		if errors.Is(err, errEpochChanged) && ctx.Err() == nil {
			p.gens.view.CompareAndSwap(gv, nil)
			continue
		}
		if err != nil {
			return nil, attempts, err
		}
		return gv.results(p, bt), attempts, nil
	}
}

// queueFedCheck queues, first in every batch transaction, the check that
// the generations the batch feeds — its registrations, chosen by feeding
// in epoch — are still the ones to feed: the projections' rebuild locks,
// shared (a rebuild in place holds one exclusively while it runs), then
// the read of the generation epoch, which fails the transaction with
// errEpochChanged unless it is epoch (no read for fixed registrations,
// epoch 0).
//
// A batch whose check sees the epoch its registrations were chosen in
// received its events before any change that committed later — the
// rebuilder, which reads the stream's end only after its change
// committed, covers them (see internal/generation's catch-up). A rebuild
// in place changes the epoch too, in the transaction that empties the
// read model, and holds the rebuild lock until it ends: a batch that holds
// the lock and sees its epoch knows that no rebuild emptied its
// projections since its view was loaded (see rowCache).
func (p *Processor) queueFedCheck(b *pgx.Batch, epoch int64) {
	if p.pauseLock {
		for _, r := range p.projs {
			p.store.Locks.QueueShared(b, r.lockKey)
		}
	}
	if epoch == 0 {
		return
	}
	p.store.Epoch.QueueRead(b).QueryRow(func(row pgx.Row) error {
		var now int64
		if err := row.Scan(&now); err != nil {
			return err
		}
		if now != epoch {
			return errEpochChanged
		}
		return nil
	})
}

// feeding returns the processor's current view, loading it when the
// cached one is missing or expired. One goroutine loads at a time; a
// transient failure is retried as a batch's are, each goroutine with its
// own backoff.
func (p *Processor) feeding(ctx context.Context) (*genView, error) {
	if p.gens == nil {
		return &genView{proc: p}, nil
	}
	if gv := p.gens.view.Load(); gv.fresh() {
		return gv, nil
	}
	backoff := p.policy.Start()
	for {
		gv, err := p.loadOnce(ctx)
		if err == nil {
			return gv, nil
		}
		if !IsTransient(err) || ctx.Err() != nil {
			return nil, fmt.Errorf("projection: load generations: %w", err)
		}
		if ok, werr := backoff.Wait(ctx); werr != nil || !ok {
			return nil, fmt.Errorf("projection: load generations: %w", errors.Join(werr, err))
		}
	}
}

// loadOnce loads the view unless another goroutine just did.
func (p *Processor) loadOnce(ctx context.Context) (*genView, error) {
	p.gens.mu.Lock()
	defer p.gens.mu.Unlock()
	if gv := p.gens.view.Load(); gv.fresh() {
		return gv, nil
	}
	gv, err := p.loadView(ctx)
	if err != nil {
		return nil, err
	}
	p.gens.view.Store(gv)
	return gv, nil
}

// loadView reads the generations of the processor's projections and builds
// the view. On the way it records generation 1 of projections that have no
// generation yet (with the processor's code version: the first processor
// to run decides it) and retires previous generations whose retention
// ended, moving the epoch on if it changed anything. Each is one statement
// in its own implicit transaction; an error on a connection that closed is
// transient.
func (p *Processor) loadView(ctx context.Context) (*genView, error) {
	names := p.Projections()
	versions := make([]int32, len(p.projs))
	for i, r := range p.projs {
		versions[i] = int32(r.version)
	}
	read := func(conn *pgx.Conn) ([]genRow, int64, error) {
		fed, ep, err := p.store.Generations.Fed(ctx, conn, names)
		out := make([]genRow, len(fed))
		for i, g := range fed {
			out[i] = genRow{projection: g.Projection, generation: g.Generation, codeVersion: g.CodeVersion, key: g.Key, schema: g.Schema,
				state: g.State, keepUntil: g.KeepUntil}
		}
		return out, ep, err
	}
	// fix records the missing generations 1 and retires the expired
	// previous ones.
	fix := func(conn *pgx.Conn) error { return p.store.Generations.Settle(ctx, conn, names, versions) }
	try := func() ([]genRow, int64, error) {
		conn, err := p.pool.Acquire(ctx)
		if err != nil {
			return nil, 0, err
		}
		defer conn.Release()
		rows, ep, err := read(conn.Conn())
		if err == nil && p.viewNeedsFix(rows) {
			if err = fix(conn.Conn()); err == nil {
				rows, ep, err = read(conn.Conn())
			}
		}
		if err != nil && conn.Conn().IsClosed() {
			err = &connLost{err} // whatever it says: transient
		}
		return rows, ep, err
	}
	rows, ep, err := try()
	if err != nil {
		return nil, err
	}
	return p.buildView(ep, rows), nil
}

// viewNeedsFix reports whether a projection has no live generation yet or a
// previous generation's retention ended.
func (p *Processor) viewNeedsFix(rows []genRow) bool {
	live := map[string]bool{}
	now := time.Now()
	for _, g := range rows {
		if g.state == StateLive {
			live[g.projection] = true
		}
		if g.state == StatePrevious && !g.keepUntil.IsZero() && !g.keepUntil.After(now) {
			return true
		}
	}
	return len(live) < len(p.projs)
}

// buildView builds the view of the fed generations rows in epoch.
func (p *Processor) buildView(epoch int64, rows []genRow) *genView {
	gv := &genView{epoch: epoch, live: map[string]*registered{}, rows: map[string]genRow{}}
	byName := map[string][]genRow{}
	for _, g := range rows {
		byName[g.projection] = append(byName[g.projection], g)
		if g.state == StateLive {
			gv.rows[g.projection] = g
		}
		if g.state == StatePrevious && !g.keepUntil.IsZero() && (gv.expires.IsZero() || g.keepUntil.Before(gv.expires)) {
			gv.expires = g.keepUntil
		}
	}
	// rank orders the generations Result.Projections may report: the live
	// one, else the one catching up, else the previous one.
	rank := map[string]int{StateLive: 0, StateCatchUp: 1, StatePrevious: 2}
	identity := true
	var targets []*registered
	report := make([]int, len(p.projs))
	reported := make([]*registered, len(p.projs))
	for _, r := range p.projs {
		report[r.index] = -1
		var best string
		n := 0
		for _, g := range byName[r.name] {
			if g.codeVersion != r.version {
				continue
			}
			n++
			if g.key != r.key || g.schema != r.schema {
				identity = false
			}
			// A registration of its own, even for generation 1: the view
			// numbers and counts its registrations its own way.
			t := &registered{name: r.name, key: g.key, generation: g.generation, schema: g.schema, version: r.version, p: r.p, event: r.event,
				batch: r.batch, lockKey: r.lockKey}
			if g.state == StateLive {
				gv.live[r.name] = t
			}
			if reported[r.index] == nil || rank[g.state] < rank[best] {
				reported[r.index], best = t, g.state
			}
			targets = append(targets, t)
		}
		if n != 1 {
			identity = false
		}
		if n == 0 {
			p.warnUnfed(r, byName[r.name])
		}
	}
	if identity {
		// Each projection's one registration is the processor's own; it
		// is the live one unless the live generation has another code
		// version (this processor then feeds the previous one).
		gv.proc = p
		clear(gv.live)
		for _, r := range p.projs {
			if g := gv.rows[r.name]; g.key == r.key {
				gv.live[r.name] = r
			}
		}
		return gv
	}
	slices.SortFunc(targets, func(a, b *registered) int { return strings.Compare(a.key, b.key) })
	v := p.derive(targets...)
	v.pauseLock = p.pauseLock
	v.owner = p.owner // it owns the generations it feeds (owner.go)
	for i, t := range targets {
		t.index = i
		base := p.byName[t.name]
		if t == reported[base.index] {
			report[base.index] = i
			t.stats = base.stats
		} else {
			t.stats = p.genStats(t.key)
		}
		v.byName[t.name] = reported[base.index]
	}
	gv.proc, gv.report = v, report
	return gv
}

// genStats returns the counters of a generation Result.Projections does not
// report.
func (p *Processor) genStats(key string) *counters {
	p.gens.statsMu.Lock()
	defer p.gens.statsMu.Unlock()
	c := p.gens.stats[key]
	if c == nil {
		c = &counters{}
		p.gens.stats[key] = c
	}
	return c
}

// warnUnfed logs, once per processor and projection, that the processor
// feeds no generation of r: none has r's code version.
func (p *Processor) warnUnfed(r *registered, rows []genRow) {
	if _, done := p.gens.warned.LoadOrStore(r.name, true); done {
		return
	}
	attrs := []any{"projection", r.name, "code_version", r.version}
	for _, g := range rows {
		attrs = append(attrs, g.state, fmt.Sprintf("generation %d (code version %d)", g.generation, g.codeVersion))
	}
	p.log.Warn("this process feeds no generation of the projection: none has its code version; "+
		"rebuild the projection with this version to build one", attrs...)
}
