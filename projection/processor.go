package projection

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/buffer"
	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/migrations"
	"github.com/inorder/inorder/projection/internal/store"
)

// This file is the processor's front: its configuration, construction and
// the calls that are not batches. Process and its attempts live in
// process.go and attempt.go.

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

// New returns a processor for projections, on the tables of cfg.Schema in
// pool's database (see package migrations for creating them).
func New(pool *pgxpool.Pool, cfg *Config, projections ...Projection) (*Processor, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	c := *cfg
	c.Schema = cmp.Or(c.Schema, migrations.DefaultSchema)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, DefaultRetryBackoff)
	c.MaxRetryTime = cmp.Or(c.MaxRetryTime, DefaultMaxRetryTime)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if err := c.Limits.Check(); err != nil {
		return nil, fmt.Errorf("projection: %w", err)
	}
	if len(projections) == 0 {
		return nil, errors.New("projection: New needs at least one projection")
	}
	p := &Processor{
		shared: shared{
			pool:   pool,
			cfg:    c,
			policy: retry.Policy{Initial: c.RetryBackoff, MaxElapsed: c.MaxRetryTime},
			tracer: c.tracer(),
			log:    c.Logger,
			buf:    buffer.New(c.Schema),
			store:  store.New(c.Schema),
		},
		byName:    make(map[string]*registered),
		pauseLock: true,
		gens:      &genCache{stats: map[string]*counters{}},
	}
	for _, pr := range projections {
		r := &registered{name: pr.Name(), key: pr.Name(), generation: 1, p: pr, version: codeVersion(pr), stats: &counters{}}
		switch {
		case r.name == "":
			return nil, errors.New("projection: a projection has an empty name")
		case len(r.name) > MaxProjectionName:
			return nil, fmt.Errorf("projection: the name %.32q… is longer than %d bytes", r.name, MaxProjectionName)
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
	if err := checkKeys(p.byName); err != nil {
		return nil, err
	}
	if len(p.cfg.Limits.Types) == 0 {
		p.cfg.Limits.Types = acceptedTypes(projections)
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

// Setup prepares the database for the processor, so that it is the one
// call needed before Process: it applies inorder's pending migrations to
// [Config].Schema, creating the schema if it is missing (as
// [migrations.Migrator.Migrate] does), then runs Setup of every projection
// that implements [Tables], in one transaction. It is idempotent and safe
// to call from any number of processes at once.
//
// Migrating holds the migrator's advisory lock on the schema, so concurrent
// calls apply each migration once: the others wait, then find nothing to
// do. On a schema with every migration applied, Setup only reads its
// tracking table: it takes no migration lock and needs no CREATE privilege
// on inorder's schema. A pending offline migration is not applied while
// other inorder workers of the schema are connected: Setup then returns an
// error wrapping [migrations.ErrWorkersConnected] (an
// [*migrations.OfflineError] naming the workers), applies nothing and runs
// no projection's Setup; stop the workers, or apply the migration with
// [migrations.Options].Force (inorder migrate --force), and call Setup
// again. A schema a newer release migrated fails with an error wrapping
// [migrations.ErrUnknownVersion], unless that release recorded its
// migrations as online (a rolling upgrade). Dry runs, forced and
// transactional migrations are package migrations' own (or the inorder
// migrate command's), run before Setup.
//
// The projections' Setup calls are serialised by an advisory lock too:
// CREATE TABLE IF NOT EXISTS run at the same time by two transactions fails
// in one of them.
func (p *Processor) Setup(ctx context.Context) error {
	if err := p.migrate(ctx); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('inorder.setup', 0))`); err != nil {
			return fmt.Errorf("projection: setup lock: %w", err)
		}
		for _, r := range p.projs {
			if s, ok := r.p.(Tables); ok {
				if err := s.Setup(ctx, tx); err != nil {
					return fmt.Errorf("projection %s: %w", r.name, err)
				}
			}
		}
		return nil
	})
}

// migrate applies inorder's pending migrations to the processor's schema;
// when there are none, it only reads the migrations' status.
func (p *Processor) migrate(ctx context.Context) error {
	m, err := migrations.New(p.pool, &migrations.Options{Schema: p.cfg.Schema, Logger: p.log})
	if err != nil {
		return fmt.Errorf("projection: setup: %w", err)
	}
	status, err := m.Status(ctx)
	if err != nil {
		return fmt.Errorf("projection: setup: %w", err)
	}
	if migrated(status) {
		return nil
	}
	if _, err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("projection: setup: migrate schema %s: %w", p.cfg.Schema, err)
	}
	return nil
}

// migrated reports whether status shows every migration of this binary
// applied and none unknown to it but those a newer release recorded as
// online: what Migrate would find nothing to do on.
func migrated(status []migrations.Status) bool {
	for _, s := range status {
		if !s.Applied || s.Unknown && !s.Online {
			return false
		}
	}
	return true
}

// acceptedTypes returns the union of the projections' types, sorted, when
// every projection lists its types (Description.Types); else nil (every
// type is accepted).
func acceptedTypes(projections []Projection) []string {
	var types []string
	for _, pr := range projections {
		t := describe(pr).Types
		if len(t) == 0 {
			return nil
		}
		types = append(types, t...)
	}
	slices.Sort(types)
	return slices.Compact(types)
}

// limits returns the limits deliveries are validated with.
func (p *Processor) limits() *aggregate.Limits { return &p.cfg.Limits }
