package projection

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/buffer"
	"github.com/inorder/inorder/migrations"
)

// Config configures a Processor. A nil *Config is valid: every field has a
// default.
type Config struct {
	// Schema holds inorder's tables (see package migrations). Default
	// migrations.DefaultSchema ("inorder").
	Schema string

	// Logger receives the processor's logs. Default: discarded.
	Logger *slog.Logger

	// Limits validates every delivery. Default: aggregate.Limits{} (1 MiB
	// payloads, any type).
	Limits aggregate.Limits

	// MaxAttempts is how many times a batch is tried while a handler keeps
	// failing before the failing event is isolated and quarantined. Default 3.
	MaxAttempts int

	// MaxRetries caps the retries of transient failures (serialization
	// failures, deadlocks, lost connections) for one batch. Default 10.
	MaxRetries int

	// RetryBackoff is the first delay between attempts; it doubles up to
	// 2 s, with jitter. Default 20 ms.
	RetryBackoff time.Duration

	// OnBatch, if set, is called at the end of every Process call (rebuild
	// batches included), committed or not, from the goroutine that called
	// Process. It must be fast and must not block: it is how metrics observe
	// batch latency (see metrics.Metrics.ObserveBatch). Default: nil.
	OnBatch func(BatchInfo)
}

// BatchInfo describes one Process call, for Config.OnBatch.
type BatchInfo struct {
	// Source is the batch's Batch.Source ("rebuild:<projection>" for the
	// batches of a rebuild).
	Source string
	// Projections names the projections the batch went through.
	Projections []string
	// Events is len(Batch.Events).
	Events int
	// Duration is the wall time of the call, retries and backoff included.
	Duration time.Duration
	// Attempts counts the transactions tried (1 when the first committed).
	Attempts int
	// Err is the error Process returned; nil when the batch committed.
	Err error
}

// Processor applies batches of deliveries to its projections through the
// version gate. It is safe for concurrent use by many goroutines, and any
// number of processes may run processors on the same schema at once.
type Processor struct {
	pool      *pgxpool.Pool
	cfg       Config
	log       *slog.Logger
	buf       *buffer.Buffer
	sql       statements
	projs     []*registered
	byName    map[string]*registered
	pauseLock bool // take the projection's shared rebuild lock in each batch
	// lockFirst, while positive, makes batches lock their version rows up
	// front instead of reading them optimistically; contention sets it to
	// lockFirstBatches, and each batch that needed no retry counts it down.
	lockFirst atomic.Int32
	// noSpeculation is set while batches should read their version rows
	// first: a speculative write found a row that was not where the batch
	// continues it (out-of-order or duplicate deliveries), and no batch has
	// since found every row where it continued it.
	noSpeculation atomic.Bool
	// speculated counts the attempts that wrote their version rows without
	// reading them, misspeculated those that tried and had to read them
	// after all (tests read them).
	speculated, misspeculated atomic.Int64
}

// lockFirstBatches is how many batches lock up front after a contended one.
const lockFirstBatches = 64

type registered struct {
	name    string
	index   int
	p       Projection
	event   EventHandler
	batch   BatchHandler
	lockKey int64
	stats   counters
}

// New returns a processor for projections, on the tables of cfg.Schema in
// pool's database (see package migrations for creating them).
func New(pool *pgxpool.Pool, cfg *Config, projections ...Projection) (*Processor, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	c := *cfg
	c.Schema = cmp.Or(c.Schema, migrations.DefaultSchema)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 3)
	c.MaxRetries = cmp.Or(c.MaxRetries, 10)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, 20*time.Millisecond)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if len(projections) == 0 {
		return nil, errors.New("projection: New needs at least one projection")
	}
	p := &Processor{
		pool:      pool,
		cfg:       c,
		log:       c.Logger,
		buf:       buffer.New(c.Schema),
		sql:       newStatements(c.Schema),
		byName:    make(map[string]*registered),
		pauseLock: true,
	}
	for _, pr := range projections {
		r := &registered{name: pr.Name(), p: pr}
		if r.name == "" {
			return nil, errors.New("projection: a projection has an empty name")
		}
		if _, dup := p.byName[r.name]; dup {
			return nil, fmt.Errorf("projection: two projections are named %q", r.name)
		}
		if bh, ok := pr.(BatchHandler); ok {
			r.batch = bh
		} else if eh, ok := pr.(EventHandler); ok {
			r.event = eh
		} else {
			return nil, fmt.Errorf("projection %s: implements neither EventHandler nor BatchHandler", r.name)
		}
		r.lockKey = advisoryKey(c.Schema, r.name)
		p.byName[r.name] = r
		p.projs = append(p.projs, r)
	}
	// A fixed order of projections keeps lock order the same in every process.
	sort.Slice(p.projs, func(a, b int) bool { return p.projs[a].name < p.projs[b].name })
	for i, r := range p.projs {
		r.index = i
	}
	return p, nil
}

// advisoryKey is the key of a projection's rebuild lock.
func advisoryKey(schema, name string) int64 {
	return advisoryKey64("inorder.rebuild\x00" + schema + "\x00" + name)
}

// advisoryKey64 derives an advisory lock key from a name.
func advisoryKey64(name string) int64 {
	h := sha256.Sum256([]byte(name))
	return int64(binary.BigEndian.Uint64(h[:8]))
}

// Projections returns the names of the processor's projections, in the order
// of Result.Projections.
func (p *Processor) Projections() []string {
	names := make([]string, len(p.projs))
	for i, r := range p.projs {
		names[i] = r.name
	}
	return names
}

// Schema returns the schema of inorder's tables.
func (p *Processor) Schema() string { return p.cfg.Schema }

// Ping checks that the processor's database answers.
func (p *Processor) Ping(ctx context.Context) error {
	if err := p.pool.Ping(ctx); err != nil {
		return fmt.Errorf("projection: ping: %w", err)
	}
	return nil
}

// Setup runs Setup of every projection that implements Setuper, in one
// transaction. Concurrent calls, from any number of processes, are
// serialised by an advisory lock: CREATE TABLE IF NOT EXISTS run at the same
// time by two transactions fails in one of them.
func (p *Processor) Setup(ctx context.Context) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('inorder.setup', 0))`); err != nil {
			return fmt.Errorf("projection: setup lock: %w", err)
		}
		for _, r := range p.projs {
			if s, ok := r.p.(Setuper); ok {
				if err := s.Setup(ctx, tx); err != nil {
					return fmt.Errorf("projection %s: setup: %w", r.name, err)
				}
			}
		}
		return nil
	})
}

// Batch is one transaction's worth of deliveries.
type Batch struct {
	// Events are the deliveries, in any order, duplicates allowed.
	Events []aggregate.Event

	// Source names where the events came from; it is recorded with rejected
	// events.
	Source string

	// Rejects are deliveries the source already found invalid (content that
	// is not JSON, say), each with its error. They are recorded in the
	// rejected table in the batch's transaction, like invalid Events.
	Rejects []Reject

	// Checkpoint, if set, is the source position this batch takes its
	// source to: it is stored (see Processor.SaveCheckpoint) in the batch's
	// transaction, so the checkpoint and the work it covers commit or roll
	// back together. Name and Position are used.
	Checkpoint *Checkpoint

	// BeforeCommit, if set, runs in the batch's transaction after the
	// projections' writes and the checkpoint, before the commit. It may run
	// more than once if the transaction is retried.
	BeforeCommit func(ctx context.Context, tx pgx.Tx) error
}

// Reject is a delivery a source could not turn into a valid event. Err
// should be an *aggregate.ValidationError, so its reason code is kept.
type Reject struct {
	Event aggregate.Event
	Err   error
}

// Process runs one batch through the gate of every projection in a single
// transaction and returns the outcome of each delivery, index-aligned with
// b.Events. When it returns a nil error, every outcome is committed and the
// deliveries may be acknowledged; when it returns an error, the deliveries
// must not be acknowledged: let the source redeliver them, or retry. (If the
// connection was lost during the commit, the batch may in fact have
// committed; its redelivery then comes back as duplicates, which is why an
// error is always safe to retry.)
//
// Transient database errors are retried with backoff (Config.MaxRetries). A
// handler error is retried (Config.MaxAttempts) and, if it persists, the
// failing event is quarantined and the rest of the batch commits.
func (p *Processor) Process(ctx context.Context, b Batch) (_ []Result, err error) {
	n := len(b.Events)
	attempts := 0
	if p.cfg.OnBatch != nil {
		start := time.Now()
		defer func() {
			p.cfg.OnBatch(BatchInfo{Source: b.Source, Projections: p.Projections(), Events: n,
				Duration: time.Since(start), Attempts: attempts, Err: err})
		}()
	}
	results := make([]Result, n)
	backing := make([]Outcome, n*len(p.projs))
	valid := make([]delivery, 0, n)
	var rejected []rejection
	for i, e := range b.Events {
		results[i].Projections = backing[i*len(p.projs) : (i+1)*len(p.projs)]
		if err := e.Validate(&p.cfg.Limits); err != nil {
			results[i].Err = err
			for k := range results[i].Projections {
				results[i].Projections[k] = Rejected
			}
			rejected = append(rejected, newRejection(b.Source, e, err))
			continue
		}
		valid = append(valid, delivery{idx: i, ev: e, id: e.StableID(), hash: e.Hash()})
	}
	for _, r := range b.Rejects {
		rejected = append(rejected, newRejection(b.Source, r.Event, r.Err))
	}
	// Sort by aggregate (byte order, as Postgres' COLLATE "C"), version and
	// batch position: a deterministic lock order, and contiguous runs.
	slices.SortFunc(valid, func(a, b delivery) int {
		return cmp.Or(strings.Compare(a.ev.Aggregate, b.ev.Aggregate), cmp.Compare(a.ev.Version, b.ev.Version), cmp.Compare(a.idx, b.idx))
	})
	rejected = dedupeRejections(rejected)

	runs := contiguousRuns(valid)
	var handlerFailures, transientFailures, contended int
	for {
		attempts++
		careful := handlerFailures >= p.cfg.MaxAttempts-1
		// The first attempt is optimistic: it reads the version rows without
		// locking them and writes them back with a compare-and-set. If
		// another transaction changed one in between, the batch is retried
		// with the rows locked up front, which always succeeds.
		locked := careful || contended > 0 || p.lockFirst.Load() > 0
		// A batch that holds one contiguous run per aggregate may skip the
		// read: it writes the versions assuming each run continues its
		// aggregate, and goes back to the read if one does not.
		m := txMode{careful: careful, locked: locked, runs: runs}
		if !locked && runs != nil && !p.noSpeculation.Load() {
			m.speculative = runs
		}
		var out txResult
		err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			var err error
			out, err = p.processTx(ctx, tx, b, valid, rejected, results, m)
			return err
		})
		if err == nil {
			if locked && !careful && contended == 0 {
				if n := p.lockFirst.Load(); n > 0 {
					p.lockFirst.CompareAndSwap(n, n-1)
				}
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
			break
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("projection: process batch: %w", errors.Join(ctx.Err(), err))
		}
		var hf *handlerFailure
		switch {
		case errors.Is(err, errContended) && !locked:
			// Writers are competing for the same aggregates: lock up front
			// for a while rather than redo batches.
			contended++
			p.lockFirst.Store(lockFirstBatches)
			continue
		case IsTransient(err):
			transientFailures++
			if transientFailures > p.cfg.MaxRetries {
				return nil, fmt.Errorf("projection: process batch: giving up after %d retries: %w", transientFailures-1, err)
			}
			p.log.WarnContext(ctx, "inorder: transient failure, retrying batch", "error", err, "retry", transientFailures)
		case errors.As(err, &hf) && !careful:
			handlerFailures++
			p.log.WarnContext(ctx, "inorder: handler failed, retrying batch", "projection", hf.projection, "error", hf.err, "attempt", handlerFailures)
		default:
			return nil, fmt.Errorf("projection: process batch: %w", err)
		}
		if err := sleep(ctx, p.backoff(handlerFailures+transientFailures)); err != nil {
			return nil, fmt.Errorf("projection: process batch: %w", err)
		}
	}
	for i := range results {
		o := Outcome(0)
		for _, po := range results[i].Projections {
			if po.severity() > o.severity() {
				o = po
			}
		}
		results[i].Outcome = o
	}
	return results, nil
}

func (p *Processor) backoff(attempt int) time.Duration {
	d := p.cfg.RetryBackoff << min(attempt-1, 10)
	d = min(d, 2*time.Second)
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// errContended reports that a version row changed between the optimistic
// read and the compare-and-set.
var errContended = errors.New("projection: version row changed concurrently")

// txMode is how one attempt at a batch treats the version rows.
type txMode struct {
	careful bool // apply under savepoints, quarantine failing events
	locked  bool // lock (and create) the version rows up front
	// runs are the batch's runs (contiguousRuns), nil if it has none.
	runs []run
	// speculative, when set, holds the batch's runs: the attempt writes the
	// versions as if every run continued its aggregate, without reading
	// them, under a savepoint; if one does not, it rolls back to the
	// savepoint and reads them.
	speculative []run
}

// txResult is what a committed attempt reports.
type txResult struct {
	tally []counts
	// continues is true when every aggregate of the batch was, in every
	// projection, at the version before its run, with nothing parked or
	// quarantined: a batch that speculation would have got right.
	continues bool
	// misspeculated is true when the attempt speculated and had to read.
	misspeculated bool
}

// run is the versions of one aggregate in a batch: first to last, every one
// in between present; valid[lo:hi] are its deliveries.
type run struct {
	agg         string
	first, last int64
	lo, hi      int
}

// contiguousRuns returns the batch's runs, one per aggregate, or nil if an
// aggregate's versions in the batch have a gap. valid is sorted by aggregate
// and version.
func contiguousRuns(valid []delivery) []run {
	var runs []run
	for i, d := range valid {
		switch {
		case i == 0 || d.ev.Aggregate != valid[i-1].ev.Aggregate:
			runs = append(runs, run{agg: d.ev.Aggregate, first: d.ev.Version, last: d.ev.Version, lo: i})
		case d.ev.Version == runs[len(runs)-1].last+1:
			runs[len(runs)-1].last = d.ev.Version
		case d.ev.Version != runs[len(runs)-1].last:
			return nil
		}
		runs[len(runs)-1].hi = i + 1
	}
	return runs
}

// handlerFailure marks an error of a projection's handler (or of the
// pipeline that carried its statements), as opposed to the gate's own.
type handlerFailure struct {
	projection string
	err        error
}

func (h *handlerFailure) Error() string {
	return fmt.Sprintf("projection %s: handler: %v", h.projection, h.err)
}
func (h *handlerFailure) Unwrap() error { return h.err }

// processTx is one attempt at a batch. With m.locked, the version rows are
// locked (and created) up front; otherwise they are read, and written back
// with a compare-and-set — unless m.speculative has them written first.
func (p *Processor) processTx(ctx context.Context, tx pgx.Tx, b Batch, valid []delivery, rejected []rejection, results []Result, m txMode) (txResult, error) {
	careful, locked := m.careful, m.locked
	tally := make([]counts, len(p.projs))
	out := txResult{tally: tally}
	batch := &pgx.Batch{}
	if len(rejected) > 0 {
		p.queueRejected(batch, rejected)
		for i := range p.projs {
			tally[i].n[Rejected] += int64(len(rejected))
		}
	}
	aggs := distinctAggregates(valid)
	states := make([]map[string]aggState, len(p.projs))
	for i := range states {
		states[i] = make(map[string]aggState, len(aggs))
	}
	written := make([]int64, len(p.projs)) // rows the speculative writes wrote
	if len(aggs) > 0 {
		// Plans made for one batch's arrays (often while the tables were
		// still empty) must not be reused for the next: a cached generic
		// plan turns index probes into scans as tables grow.
		batch.Queue(`SET LOCAL plan_cache_mode = force_custom_plan`)
		if p.pauseLock {
			for _, r := range p.projs {
				batch.Queue(p.sql.pauseShared, r.lockKey)
			}
		}
		if m.speculative != nil {
			batch.Queue(`SAVEPOINT inorder_speculation`)
			for i, r := range p.projs {
				if err := p.queueSpeculation(batch, r, valid, m.speculative, states[i], &written[i]); err != nil {
					return out, err
				}
			}
		} else {
			p.queueReads(batch, aggs, states, locked)
		}
	}
	if batch.Len() > 0 {
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return out, fmt.Errorf("read versions: %w", err)
		}
	}
	if len(aggs) == 0 {
		return out, p.beforeCommit(ctx, tx, b)
	}
	if m.speculative != nil {
		for _, n := range written {
			if n != int64(len(m.speculative)) {
				out.misspeculated = true
			}
		}
		if out.misspeculated {
			// Undo what was written and take the ordinary way.
			p.misspeculated.Add(1)
			m.speculative = nil
			batch = &pgx.Batch{}
			batch.Queue(`ROLLBACK TO SAVEPOINT inorder_speculation`)
			batch.Queue(`RELEASE SAVEPOINT inorder_speculation`)
			for i := range states {
				clear(states[i])
			}
			p.queueReads(batch, aggs, states, locked)
			if err := tx.SendBatch(ctx, batch).Close(); err != nil {
				return out, fmt.Errorf("read versions: %w", err)
			}
		} else {
			p.speculated.Add(1)
			out.continues = true
		}
	}
	if m.speculative == nil && m.runs != nil {
		out.continues = continues(m.runs, states)
	}
	for i, r := range p.projs {
		outcome := func(idx int, o Outcome) {
			results[idx].Projections[i] = o
			tally[i].n[o]++
		}
		plans, conflicts, err := p.planProjection(ctx, tx, r, valid, states[i], outcome)
		if err != nil {
			return out, err
		}
		if m.speculative != nil {
			for _, pl := range plans {
				pl.written = pl.after()
			}
		} else if err := p.casVersions(ctx, tx, r, plans, locked); err != nil {
			return out, err
		}
		if err := p.apply(ctx, tx, r, plans, conflicts, careful, &tally[i]); err != nil {
			return out, err
		}
		for _, pl := range plans {
			pl.settle(outcome)
		}
	}
	return out, p.beforeCommit(ctx, tx, b)
}

// queueReads queues the reads of the version rows of aggs, for every
// projection, into states; locked, it creates missing rows and locks them.
func (p *Processor) queueReads(batch *pgx.Batch, aggs []string, states []map[string]aggState, locked bool) {
	for i, r := range p.projs {
		read := p.sql.readVersions
		if locked {
			batch.Queue(p.sql.insertVersions, r.name, aggs)
			read = p.sql.lockVersions
		}
		into := states[i]
		batch.Queue(read, r.name, aggs).Query(func(rows pgx.Rows) error {
			var agg string
			var st aggState
			for rows.Next() {
				if err := rows.Scan(&agg, &st.version, &st.parked, &st.blocked, &st.rev); err != nil {
					return err
				}
				into[agg] = st
			}
			return rows.Err()
		})
	}
}

// queueSpeculation queues the write that moves every aggregate of runs from
// the version before its run to its last version, for projection r, with
// the runs' applied-log entries, and fills states with the states the runs
// assume. *written receives the number of rows written as assumed (see
// statements.specVersions).
func (p *Processor) queueSpeculation(batch *pgx.Batch, r *registered, valid []delivery, runs []run, states map[string]aggState, written *int64) error {
	aggs := make([]string, len(runs))
	from, to := make([]int64, len(runs)), make([]int64, len(runs))
	var log logEntries
	var spillAggs []string
	var spillFrom []int64
	for i, ru := range runs {
		states[ru.agg] = aggState{version: ru.first - 1}
		aggs[i], from[i], to[i] = ru.agg, ru.first-1, ru.last
		if crossesPage(ru.first-1, ru.last) {
			spillAggs, spillFrom = append(spillAggs, ru.agg), append(spillFrom, ru.first-1)
		}
		log.start()
		for k := ru.lo; k < ru.hi; k++ {
			// The first delivery of each version wins, as in planner.plan.
			if k == ru.lo || valid[k].ev.Version != valid[k-1].ev.Version {
				log.add(ru.agg, valid[k].ev.Version, valid[k].id, valid[k].hash)
			}
		}
	}
	log.done()
	if log.err != nil {
		return log.err
	}
	if len(spillAggs) > 0 {
		batch.Queue(p.sql.spillLog, r.name, spillAggs, spillFrom)
	}
	batch.Queue(p.sql.specVersions, r.name, aggs, from, to, log.ids, log.hashes).QueryRow(func(row pgx.Row) error {
		return row.Scan(written)
	})
	return nil
}

// logEntries gathers, row by row, the applied-log entries that the version
// statements append to version rows: per row, the entry count, the ids as an
// array literal (nil when every id is the default "<aggregate>:<version>",
// which the log stores as NULL) and the 16-byte hashes concatenated. Call
// start before each row's entries and done after the last row.
type logEntries struct {
	n      []int32
	ids    []*string
	hashes [][]byte
	err    error // a hash that is not 16 bytes long

	buf     []byte // every row's hashes; hashes slices it in done
	starts  []int  // where each row's hashes start in buf
	lit     []byte // the current row's ids literal
	custom  bool   // the current row has an id that is not the default one
	entries int    // entries of the current row
}

// start begins a row.
func (l *logEntries) start() {
	l.finish()
	l.n, l.ids, l.starts = append(l.n, 0), append(l.ids, nil), append(l.starts, len(l.buf))
	l.lit, l.custom, l.entries = append(l.lit[:0], '{'), false, 0
}

// add appends the entry of an aggregate's version to the current row.
func (l *logEntries) add(agg string, version int64, id string, hash []byte) {
	if len(hash) != 16 && l.err == nil {
		// Every hash is aggregate.Event.Hash: 16 bytes. A log entry of
		// another size would shift every entry after it.
		l.err = fmt.Errorf("projection: %s version %d has a %d-byte hash, not 16", agg, version, len(hash))
	}
	if l.entries > 0 {
		l.lit = append(l.lit, ',')
	}
	if id == aggregate.DefaultID(agg, version) {
		l.lit = append(l.lit, "NULL"...)
	} else {
		l.custom = true
		l.lit = append(l.lit, '"')
		for i := 0; i < len(id); i++ {
			if id[i] == '"' || id[i] == '\\' {
				l.lit = append(l.lit, '\\')
			}
			l.lit = append(l.lit, id[i])
		}
		l.lit = append(l.lit, '"')
	}
	l.entries++
	l.buf = append(l.buf, hash...)
}

// finish closes the current row, if any.
func (l *logEntries) finish() {
	if len(l.n) == 0 {
		return
	}
	last := len(l.n) - 1
	l.n[last] = int32(l.entries)
	if l.custom {
		lit := string(append(l.lit, '}'))
		l.ids[last] = &lit
	}
	l.custom = false
}

// done closes the last row and slices the rows' hashes.
func (l *logEntries) done() {
	l.finish()
	l.hashes = make([][]byte, len(l.starts))
	for i, from := range l.starts {
		to := len(l.buf)
		if i+1 < len(l.starts) {
			to = l.starts[i+1]
		}
		l.hashes[i] = l.buf[from:to:to]
		if l.hashes[i] == nil {
			l.hashes[i] = []byte{} // an empty log, not NULL
		}
	}
}

// continues reports whether every run starts right after its aggregate's
// version in every projection, with nothing parked or quarantined.
func continues(runs []run, states []map[string]aggState) bool {
	for _, st := range states {
		for _, ru := range runs {
			s, ok := st[ru.agg]
			if ok && (s.version != ru.first-1 || s.parked != 0 || s.blocked) || !ok && ru.first != 1 {
				return false
			}
		}
	}
	return true
}

// casVersions writes the planned state of every aggregate whose state
// changes, before the handler runs: from here on the transaction holds those
// rows, so nothing it does next can race another writer. It fails with
// errContended if a row changed since it was read.
func (p *Processor) casVersions(ctx context.Context, tx pgx.Tx, r *registered, plans []*aggPlan, locked bool) error {
	var aggs []string
	var vers, revs []int64
	var parked []int32
	var blocked []bool
	var log logEntries
	var spillAggs []string
	var spillFrom []int64
	for _, pl := range plans {
		next := pl.after()
		if next == pl.before {
			continue
		}
		if len(pl.run) > 0 && crossesPage(pl.before.version, next.version) {
			spillAggs, spillFrom = append(spillAggs, pl.agg), append(spillFrom, pl.before.version)
		}
		aggs, vers, parked, blocked = append(aggs, pl.agg), append(vers, next.version), append(parked, next.parked), append(blocked, next.blocked)
		revs = append(revs, pl.before.rev+1)
		pl.written = next
		log.start()
		for _, c := range pl.run {
			log.add(pl.agg, c.ev.Version, c.id, c.hash)
		}
	}
	if len(aggs) == 0 {
		return nil
	}
	log.done()
	if log.err != nil {
		return log.err
	}
	b := &pgx.Batch{}
	if len(spillAggs) > 0 {
		b.Queue(p.sql.spillLog, r.name, spillAggs, spillFrom)
	}
	var n int64
	b.Queue(p.sql.casVersions, r.name, aggs, vers, parked, blocked, revs, log.n, log.ids, log.hashes).Exec(func(ct pgconn.CommandTag) error {
		n = ct.RowsAffected()
		return nil
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("projection %s: write versions: %w", r.name, err)
	}
	if n != int64(len(aggs)) {
		if locked {
			return fmt.Errorf("projection %s: wrote %d of %d locked version rows", r.name, n, len(aggs))
		}
		return errContended
	}
	return nil
}

func (p *Processor) beforeCommit(ctx context.Context, tx pgx.Tx, b Batch) error {
	if b.Checkpoint != nil {
		cb := &pgx.Batch{}
		if err := p.queueCheckpoint(cb, b.Checkpoint); err != nil {
			return err
		}
		if err := tx.SendBatch(ctx, cb).Close(); err != nil {
			return fmt.Errorf("save checkpoint: %w", err)
		}
	}
	if b.BeforeCommit == nil {
		return nil
	}
	if err := b.BeforeCommit(ctx, tx); err != nil {
		return fmt.Errorf("before commit: %w", err)
	}
	return nil
}

func distinctAggregates(valid []delivery) []string {
	var aggs []string
	for i, d := range valid {
		if i == 0 || d.ev.Aggregate != valid[i-1].ev.Aggregate {
			aggs = append(aggs, d.ev.Aggregate)
		}
	}
	return aggs
}

// planProjection loads what the locked states call for (parked events,
// quarantined events, the applied log of stale versions) and classifies the
// batch for projection r.
func (p *Processor) planProjection(ctx context.Context, tx pgx.Tx, r *registered, valid []delivery, states map[string]aggState, outcome func(int, Outcome)) ([]*aggPlan, []conflict, error) {
	// What the batch needs to know beyond the version rows: all parked
	// events of an aggregate the batch can advance (its next version is in
	// the batch); only the id and hash of parked versions the batch
	// redelivers otherwise; the quarantined event of a blocked aggregate;
	// the applied log of stale versions.
	var parkedAggs, probeAggs, blockedAggs, staleAggs []string
	var probeVers, staleVers []int64
	for i := 0; i < len(valid); {
		agg := valid[i].ev.Aggregate
		st := states[agg]
		j := i
		advances := false
		for j < len(valid) && valid[j].ev.Aggregate == agg {
			advances = advances || valid[j].ev.Version == st.version+1
			j++
		}
		if st.blocked {
			blockedAggs = append(blockedAggs, agg)
		}
		if st.parked > 0 && advances && !st.blocked {
			parkedAggs = append(parkedAggs, agg)
		}
		for k := i; k < j; k++ {
			d := valid[k]
			if k > i && valid[k-1].ev.Version == d.ev.Version {
				continue
			}
			switch {
			case d.ev.Version <= st.version:
				staleAggs, staleVers = append(staleAggs, agg), append(staleVers, d.ev.Version)
			case st.parked > 0 && (!advances || st.blocked) && d.ev.Version > st.version+1:
				probeAggs, probeVers = append(probeAggs, agg), append(probeVers, d.ev.Version)
			}
		}
		i = j
	}
	parked := map[string][]buffer.Parked{}
	quarantined := map[string]quarantineRef{}
	applied := map[string]map[int64]record{}
	batch := &pgx.Batch{}
	if len(parkedAggs) > 0 {
		p.buf.QueueLoad(batch, r.name, parkedAggs, func(ps []buffer.Parked) {
			for _, e := range ps {
				parked[e.Aggregate] = append(parked[e.Aggregate], e)
			}
		})
	}
	if len(probeAggs) > 0 {
		p.buf.QueueLoadKeys(batch, r.name, probeAggs, probeVers, func(ps []buffer.Parked) {
			for _, e := range ps {
				parked[e.Aggregate] = append(parked[e.Aggregate], e)
			}
		})
	}
	if len(blockedAggs) > 0 {
		batch.Queue(p.sql.loadQuarantineRefs, r.name, blockedAggs).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var agg string
				var q quarantineRef
				if err := rows.Scan(&agg, &q.version, &q.rec.id, &q.rec.hash); err != nil {
					return err
				}
				q.rec.state = "quarantined"
				quarantined[agg] = q
			}
			return rows.Err()
		})
	}
	if len(staleAggs) > 0 {
		batch.Queue(p.sql.loadApplied, r.name, staleAggs, staleVers).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var agg string
				var v int64
				rec := record{state: "applied"}
				if err := rows.Scan(&agg, &v, &rec.id, &rec.hash); err != nil {
					return err
				}
				if applied[agg] == nil {
					applied[agg] = map[int64]record{}
				}
				applied[agg][v] = rec
			}
			return rows.Err()
		})
	}
	if batch.Len() > 0 {
		if err := tx.SendBatch(ctx, batch).Close(); err != nil {
			return nil, nil, fmt.Errorf("projection %s: load gate state: %w", r.name, err)
		}
	}
	pl := &planner{outcomes: outcome}
	var plans []*aggPlan
	for i := 0; i < len(valid); {
		agg := valid[i].ev.Aggregate
		j := i
		for j < len(valid) && valid[j].ev.Aggregate == agg {
			j++
		}
		var qrec *record
		q, blocked := quarantined[agg]
		if blocked {
			qrec = &q.rec
		}
		plans = append(plans, pl.plan(agg, states[agg], valid[i:j], parked[agg], qrec, q.version, applied[agg]))
		i = j
	}
	return plans, pl.conflicts, nil
}

type quarantineRef struct {
	version int64
	rec     record
}

// apply runs the projection's handler over the plans' runs and queues the
// gate's writes. In careful mode each aggregate is applied under a savepoint
// and a failing event is cut off and quarantined.
func (p *Processor) apply(ctx context.Context, tx pgx.Tx, r *registered, plans []*aggPlan, conflicts []conflict, careful bool, tally *counts) error {
	ht := newTx(tx, r.name)
	if !careful {
		var events []aggregate.Event
		for _, pl := range plans {
			for _, c := range pl.run {
				events = append(events, c.ev)
			}
		}
		// The handler goes first, so a read it starts with is not held back
		// by the gate's writes; those join the handler's queued statements.
		if err := p.callHandler(ctx, ht, r, events); err != nil {
			return &handlerFailure{projection: r.name, err: err}
		}
		p.queueWrites(ht.batch, r, plans, conflicts, tally, true)
		if err := ht.Flush(ctx); err != nil {
			return &handlerFailure{projection: r.name, err: err}
		}
		return nil
	}
	for _, pl := range plans {
		if len(pl.run) == 0 {
			continue
		}
		if err := p.applyCarefully(ctx, tx, r, pl); err != nil {
			return err
		}
	}
	p.queueWrites(ht.batch, r, plans, conflicts, tally, true)
	return ht.Flush(ctx)
}

// applyCarefully applies one aggregate's run under savepoints, cutting the
// run at the first event the handler fails on.
func (p *Processor) applyCarefully(ctx context.Context, tx pgx.Tx, r *registered, pl *aggPlan) error {
	events := make([]aggregate.Event, len(pl.run))
	for k, c := range pl.run {
		events[k] = c.ev
	}
	herr, err := p.trySavepoint(ctx, tx, r, events)
	if err != nil || herr == nil {
		return err
	}
	for k := range events {
		herr, err := p.trySavepoint(ctx, tx, r, events[k:k+1])
		if err != nil {
			return err
		}
		if herr != nil {
			pl.cut, pl.err = k, herr
			p.log.ErrorContext(ctx, "inorder: quarantining event", "projection", r.name, "aggregate", pl.agg, "version", events[k].Version, "error", herr)
			return nil
		}
	}
	return nil
}

// trySavepoint applies events under a savepoint. It returns the handler's
// error (rolled back to the savepoint), or a fatal error for the whole
// transaction (transient failures, cancellation).
func (p *Processor) trySavepoint(ctx context.Context, tx pgx.Tx, r *registered, events []aggregate.Event) (handlerErr, err error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("savepoint: %w", err)
	}
	ht := newTx(sp, r.name)
	herr := p.callHandler(ctx, ht, r, events)
	if herr == nil {
		herr = ht.Flush(ctx)
	}
	if herr == nil {
		if err := sp.Commit(ctx); err != nil {
			return nil, fmt.Errorf("release savepoint: %w", err)
		}
		return nil, nil
	}
	if ctx.Err() != nil || IsTransient(herr) {
		return nil, herr
	}
	if err := sp.Rollback(ctx); err != nil {
		return nil, fmt.Errorf("rollback to savepoint: %w", err)
	}
	return herr, nil
}

func (p *Processor) callHandler(ctx context.Context, tx *Tx, r *registered, events []aggregate.Event) error {
	if len(events) == 0 {
		return nil
	}
	if r.batch != nil {
		return r.batch.ApplyBatch(ctx, tx, events)
	}
	for _, e := range events {
		if err := r.event.Apply(ctx, tx, e); err != nil {
			return &HandlerError{Projection: r.name, Aggregate: e.Aggregate, Version: e.Version, Err: err}
		}
	}
	return nil
}

// queueWrites queues the gate's writes for the plans: parked inserts and
// deletes, quarantines, conflicts, the version rows of runs the handler cut
// short and, unless casVersions or specVersions put them in the version rows
// already (inRow), the applied log entries of the runs.
func (p *Processor) queueWrites(b *pgx.Batch, r *registered, plans []*aggPlan, conflicts []conflict, tally *counts, inRow bool) {
	var park []aggregate.Event
	var parkHashes [][]byte
	var delAggs, logAggs, logIDs []string
	var delVers, logVers []int64
	var logHashes [][]byte
	for _, pl := range plans {
		for _, c := range pl.park {
			park = append(park, c.ev)
			parkHashes = append(parkHashes, c.hash)
		}
		for k, c := range pl.run {
			switch {
			case k < pl.cut:
				if !inRow {
					logAggs, logVers, logIDs, logHashes = append(logAggs, pl.agg), append(logVers, c.ev.Version), append(logIDs, c.id), append(logHashes, c.hash)
				}
				tally.drained += b2i(c.origin == fromParked)
				switch c.origin {
				case fromParked:
					delAggs, delVers = append(delAggs, pl.agg), append(delVers, c.ev.Version)
				case fromQuarantine:
					b.Queue(p.sql.deleteQuarantine, r.name, pl.agg)
				}
			case k == pl.cut:
				if c.origin == fromParked {
					delAggs, delVers = append(delAggs, pl.agg), append(delVers, c.ev.Version)
				}
				b.Queue(p.sql.upsertQuarantine, r.name, pl.agg, c.ev.Version, c.id, c.hash, c.ev.Type, c.ev.Data, c.ev.Metadata, pl.err.Error(), cmp.Or(pl.attempts, p.cfg.MaxAttempts))
				if c.origin != fromBatch {
					tally.n[Quarantined]++
				}
			default:
				if c.origin == fromBatch {
					park = append(park, c.ev)
					parkHashes = append(parkHashes, c.hash)
				}
			}
		}
		// casVersions wrote the planned state; a careful run that cut the
		// plan short corrects it.
		if after := pl.after(); after != pl.written && after != pl.before {
			trim := pl.written.version - after.version // log entries of the run's cut part
			b.Queue(p.sql.setVersion, r.name, pl.agg, after.version, after.parked, after.blocked, trim)
		}
	}
	if len(park) > 0 {
		p.buf.QueuePark(b, r.name, park, parkHashes)
	}
	if len(delAggs) > 0 {
		p.buf.QueueDelete(b, r.name, delAggs, delVers)
	}
	if len(logAggs) > 0 {
		b.Queue(p.sql.insertApplied, r.name, logAggs, logVers, logIDs, logHashes)
	}
	if len(conflicts) > 0 {
		p.queueConflicts(b, r.name, conflicts)
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (p *Processor) queueConflicts(b *pgx.Batch, projection string, cs []conflict) {
	n := len(cs)
	aggs, states, eids, iids, types := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	vers, counts := make([]int64, n), make([]int64, n)
	ehash, ihash, data, meta := make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n)
	for i, c := range cs {
		aggs[i], vers[i], states[i], eids[i], ehash[i] = c.agg, c.version, c.existing.state, c.existing.id, c.existing.hash
		if ehash[i] == nil {
			ehash[i] = []byte{}
		}
		iids[i], ihash[i], types[i], data[i], meta[i], counts[i] = c.incoming.id, c.incoming.hash, c.incoming.ev.Type, c.incoming.ev.Data, c.incoming.ev.Metadata, c.count
	}
	b.Queue(p.sql.upsertConflicts, projection, aggs, vers, states, eids, ehash, iids, ihash, types, data, meta, counts)
}

// rejection is an invalid delivery to record.
type rejection struct {
	fingerprint []byte
	source      string
	ev          aggregate.Event
	reason      string
	err         string
	count       int64
}

func newRejection(source string, e aggregate.Event, err error) rejection {
	h := sha256.New()
	for _, s := range []string{source, e.ID, e.Aggregate, fmt.Sprint(e.Version), e.Type, string(e.Data), string(e.Metadata), err.Error()} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return rejection{fingerprint: h.Sum(nil), source: source, ev: e, reason: aggregate.Reason(err), err: err.Error(), count: 1}
}

func dedupeRejections(rs []rejection) []rejection {
	seen := map[string]int{}
	out := rs[:0]
	for _, r := range rs {
		if i, ok := seen[string(r.fingerprint)]; ok {
			out[i].count++
			continue
		}
		seen[string(r.fingerprint)] = len(out)
		out = append(out, r)
	}
	return out
}

// queueRejected records rejections. Whatever a delivery holds, the insert
// must succeed: text that PostgreSQL cannot store (NUL bytes, invalid UTF-8)
// goes in escaped, with its exact bytes in the raw columns.
func (p *Processor) queueRejected(b *pgx.Batch, rs []rejection) {
	n := len(rs)
	fps, data, meta := make([][]byte, n), make([][]byte, n), make([][]byte, n)
	srcs, ids, aggs, types, reasons, errs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	rawIDs, rawAggs, rawTypes := make([][]byte, n), make([][]byte, n), make([][]byte, n)
	vers, counts := make([]int64, n), make([]int64, n)
	text := func(s string, raw *[]byte) string {
		e, ok := escapeText(s)
		if !ok {
			*raw = []byte(s)
		}
		return e
	}
	for i, r := range rs {
		fps[i], vers[i], data[i], meta[i], counts[i] = r.fingerprint, r.ev.Version, r.ev.Data, r.ev.Metadata, r.count
		ids[i] = text(r.ev.ID, &rawIDs[i])
		aggs[i] = text(r.ev.Aggregate, &rawAggs[i])
		types[i] = text(r.ev.Type, &rawTypes[i])
		srcs[i], _ = escapeText(r.source)
		reasons[i], _ = escapeText(r.reason)
		errs[i], _ = escapeText(r.err)
	}
	b.Queue(p.sql.upsertRejected, fps, srcs, ids, aggs, vers, types, data, meta, reasons, errs, counts, rawIDs, rawAggs, rawTypes)
}

// counts tallies one transaction's outcomes for one projection.
type counts struct {
	n       [len(outcomeNames)]int64
	drained int64
}

// counters are a projection's cumulative outcome counts.
type counters struct {
	n       [len(outcomeNames)]atomic.Int64
	drained atomic.Int64
	batches atomic.Int64
}

func (c *counters) add(t counts) {
	for i, v := range t.n {
		if v != 0 {
			c.n[i].Add(v)
		}
	}
	c.drained.Add(t.drained)
	c.batches.Add(1)
}

// Counts are a projection's cumulative counts since the processor started.
type Counts struct {
	// Deliveries counts deliveries by outcome.
	Deliveries map[Outcome]int64
	// Drained counts parked events applied once their predecessors arrived.
	Drained int64
	// Batches counts committed transactions.
	Batches int64
}

// Applied returns every event applied: deliveries applied directly plus
// parked events drained.
func (c Counts) Applied() int64 { return c.Deliveries[Applied] + c.Drained }

// Counts returns the cumulative counts of every projection, by name.
func (p *Processor) Counts() map[string]Counts {
	out := make(map[string]Counts, len(p.projs))
	for _, r := range p.projs {
		c := Counts{Deliveries: map[Outcome]int64{}, Drained: r.stats.drained.Load(), Batches: r.stats.batches.Load()}
		for _, o := range Outcomes {
			c.Deliveries[o] = r.stats.n[o].Load()
		}
		out[r.name] = c
	}
	return out
}
