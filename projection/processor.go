package projection

import (
	"crypto/sha256"
	"encoding/binary"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/buffer"
	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the processor: its configuration, the Processor type and
// its registrations, what every other file of the gate builds on. Its making
// and the calls that are not batches are in setup.go; the batches' path in
// the files above them.

// Defaults of Config.
const (
	// DefaultMaxAttempts is Config.MaxAttempts's default.
	DefaultMaxAttempts = 3
	// DefaultRetryBackoff is Config.RetryBackoff's default.
	DefaultRetryBackoff = 20 * time.Millisecond
	// DefaultMaxRetryTime is Config.MaxRetryTime's default: longer than a
	// PostgreSQL crash recovery or a failover usually takes.
	DefaultMaxRetryTime = time.Minute
	// MaxProjectionName is the longest projection name New accepts, in
	// bytes: names are part of every gate key, which PostgreSQL indexes.
	MaxProjectionName = 128
)

// Config configures a Processor. A nil *Config is valid: every field has a
// default.
type Config struct {
	// Schema holds inorder's tables (see package migrations). Default
	// migrations.DefaultSchema ("inorder").
	Schema string

	// Logger receives the processor's logs. Default: discarded.
	Logger *slog.Logger

	// Limits validates every delivery. Default: aggregate.Limits{} (see its
	// defaults), with Types, when empty, the union of the projections'
	// types if every projection lists them (Description.Types).
	Limits aggregate.Limits

	// MaxAttempts is how many times a batch is tried while a handler keeps
	// failing before the failing event is isolated and quarantined.
	// Default DefaultMaxAttempts (3).
	MaxAttempts int

	// RetryBackoff is the first delay between attempts; it doubles up to
	// 5 s, with jitter (package internal/retry). Default
	// DefaultRetryBackoff (20 ms).
	RetryBackoff time.Duration

	// MaxRetryTime bounds the time one Process call keeps retrying
	// transient failures (serialization failures, lost connections, a
	// server restarting or refusing connections) before it returns the
	// last one. Default DefaultMaxRetryTime (1 min); negative retries until
	// the context ends.
	MaxRetryTime time.Duration

	// TracerProvider, if set, traces every Process call with an
	// OpenTelemetry span ("inorder.process": source, projections, events,
	// attempts, outcome counts, retries as span events), linked to the
	// traces named by the "traceparent" of the events' metadata. Default:
	// no tracing.
	TracerProvider trace.TracerProvider

	// RowCache bounds the aggregates whose gate state the processor
	// remembers between batches, per kind of state: for inline projections
	// (Inline), that a commit of its own wrote the row and the version it
	// left it at; for the others, the version row its last commit left and,
	// up to 65,536 events in all, the events parked behind it. What it
	// remembers lets a batch skip reading them (an in-order batch its
	// inline rows; a batch out of order its version rows and parked
	// events); it is a guess each transaction checks, never trusted: a
	// check that fails makes the batch read them, as without the memory.
	// At the bound the inline rows are forgotten all at once and the
	// version rows a quarter at a time, and read back as batches meet them
	// again: memory stays bounded (about 100 bytes an aggregate and
	// projection, plus the parked events' payloads) whatever the number of
	// aggregates, at the cost of one read per forgotten row. Default
	// DefaultRowCache (131,072); negative remembers nothing.
	RowCache int

	// Owner makes the processor try to own the gate key of each of its
	// inline projections (Inline): to hold a lease on it, fenced, so that
	// while it holds it no other writer changes the key's gate state
	// without its knowing (docs/owner.md). An owner inserts no guard rows
	// for the aggregates its batches create: about a tenth of a cheap
	// inline projection's time (docs/benchmarks.md, "The fenced owner,
	// built").
	// One process owns a key at a time; the others, and every processor
	// without Owner, write as before and pay a lock and an update of
	// nothing per transaction. Correctness never depends on it: a batch
	// whose check finds the lease moved is retried, guarded. Enable it
	// only once every process writing the schema runs a version that
	// knows leases (they fence their writes), and call Close when done.
	// Default false.
	Owner bool

	// OnBatch, if set, is called at the end of every Process call (rebuild
	// batches included), committed or not, from the goroutine that called
	// Process. It must be fast and must not block: it is how metrics observe
	// batch latency (see metrics.Metrics.ObserveBatch). Default: nil.
	OnBatch func(BatchInfo)
}

// Processor applies batches of deliveries to its projections through the
// version gate. It is safe for concurrent use by many goroutines, and any
// number of processes may run processors on the same schema at once.
type Processor struct {
	// shared is what the processors derived from this one (derive) share
	// with it.
	shared
	totals    totalsCache // the status totals' last reading (statustotals.go)
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
	// noMixed, while positive, makes attempts general rather than mixed:
	// set to noMixedBatches after a mixed attempt missed, each general
	// batch counts it down.
	noMixed atomic.Int32
	// rows remembers the inline rows the processor's commits wrote
	// (inline_rows.go).
	rows rowCache
	// states remembers the version rows the processor's commits left
	// (statecache.go); memOff, while positive, makes attempts read them
	// instead: set to memoryOffBatches after a check of the memory failed,
	// each committed batch counts it down. memoryHits counts the version
	// rows attempts took from it, memoryMisses the failed checks (tests
	// read them).
	states                   stateCache
	memOff                   atomic.Int32
	memoryHits, memoryMisses atomic.Int64
	// parkedRemembered counts the aggregates whose parked events attempts
	// took from the memory (tests read it).
	parkedRemembered atomic.Int64
	// speculated counts the attempts that wrote their version rows without
	// reading them, misspeculated those that tried and had to read them
	// after all (tests read them).
	speculated, misspeculated atomic.Int64
	// rowsCounted counts the inline rows speculation counted rather than
	// took from rows (tests read it).
	rowsCounted atomic.Int64
	// rowsLocked counts the inline rows attempts locked before their
	// handlers ran (queueInlineLock).
	rowsLocked atomic.Int64
	// owner holds the leases of a processor with Config.Owner (owner.go),
	// shared with the view of the generations it feeds; nil otherwise, and
	// in the other processors derived from one (a rebuild's replay).
	owner *owner
	// gens caches the generations the processor feeds (generations.go);
	// nil in the processors that feed a fixed set (views, rebuilds).
	gens *genCache
}

// shared is what every processor derived from one New shares: the
// processors of a generations' view, of a rebuild's replay and of an
// in-place rebuild (derive) copy it whole, so none lacks a part of it.
type shared struct {
	pool   *pgxpool.Pool
	cfg    Config
	policy retry.Policy
	tracer trace.Tracer
	log    *slog.Logger
	buf    *buffer.Buffer
	store  *store.Store
	// vacancies are the leases whose owners may be gone (owner.go).
	vacancies *vacancies
}

// derive returns a processor of projs sharing p's pool, configuration and
// statements, with counts and caches of its own; byName maps each
// projection's name to the first of projs with it. It feeds the
// generations projs name: no generation lookup, no rebuild lock.
func (p *Processor) derive(projs ...*registered) *Processor {
	d := &Processor{shared: p.shared, projs: projs, byName: make(map[string]*registered, len(projs))}
	for _, r := range projs {
		if _, ok := d.byName[r.name]; !ok {
			d.byName[r.name] = r
		}
	}
	return d
}

// noMixedBatches is how many batches are general after a mixed attempt
// missed.
const noMixedBatches = 16

// lockFirstBatches is how many batches lock up front after a contended one.
const lockFirstBatches = 64

// registered is one projection of a processor.
type registered struct {
	name    string
	index   int // in Processor.projs and Result.Projections
	p       Projection
	event   EventHandler
	batch   BatchHandler
	lockKey int64 // of the projection's rebuild lock
	// key is the projection's gate key: the value of the projection column
	// of every gate row (versions, applied, parked, quarantine, conflicts)
	// of the generation this registration feeds. Generation 1 uses the
	// bare name (see gennames.go).
	key string
	// schema is the generation's read-model schema, put first on the
	// search_path while the projection's handler runs; "" leaves the
	// search_path alone (generation 1).
	schema string
	// version is the projection's code version (Description.Version; default 1).
	version int
	// generation numbers the generation this registration feeds (1 for
	// the processor's own registrations).
	generation int
	// stats are the counts of the generation that Result.Projections
	// reports (see generations.go); shared by the registrations that feed it.
	stats *counters
	// inline is the projection's inline table in the generation's schema
	// and the gate's statements on it (nil if not inline), found once.
	inlineOnce sync.Once
	inline     *inlineState
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

// limits returns the limits deliveries are validated with.
func (p *Processor) limits() *aggregate.Limits { return &p.cfg.Limits }
