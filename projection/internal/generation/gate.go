package generation

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/buffer"
	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the seam between the rebuild and package projection:
// what the rebuild is given (Env, Projection) and the gate it applies
// events through (Gate, Target), which package projection implements over
// its Processor.

// Env is what every rebuild of one processor shares: its pool, the
// statements on inorder's tables (store) and on the parked table (buffer),
// its log, its retry policy, and the errors package projection reports.
type Env struct {
	Pool   *pgxpool.Pool
	Store  *store.Store
	Buffer *buffer.Buffer
	Log    *slog.Logger
	// Policy retries the replay's transient failures, as the gate retries
	// a batch's.
	Policy retry.Policy
	Errors Errors
}

// Errors are package projection's sentinel errors that a rebuild wraps:
// projection declares and documents them, this package reports them.
type Errors struct {
	// BuildInProgress: another Build holds the projection's build lock.
	BuildInProgress error
	// NoSchema: the projection's Setup created no table in the new
	// generation's schema.
	NoSchema error
	// NoPrevious: a rollback without a previous generation.
	NoPrevious error
	// NotReady: a switch request for a generation that does not wait for
	// one.
	NotReady error
}

// Projection is the projection a rebuild works on, as package projection
// describes it.
type Projection struct {
	Name string
	// Version is the projection's code version in this process.
	Version int
	// Lock is the key of the projection's rebuild lock: every batch and
	// operator action takes it shared, a rebuild in place exclusively.
	Lock int64
	// BuildLock is the key of the session lock one side-by-side Build of
	// the projection holds.
	BuildLock int64
	// Gate is the projection's gate: the rebuild's only way to apply
	// events and to reach the projection's own code.
	Gate Gate
}

// Gate is the batch gate of one projection as a rebuild reaches it: its
// public path. Package projection implements it over its Processor. A
// rebuild applies events only through it — whole batches through a gate
// (On, Fed), or, for the replay's events that continue their aggregate,
// the projection's handler inside the replay's transaction (Target.Apply)
// — and knows of the projection only what it says.
type Gate interface {
	// Generations lists the projection's generations, oldest first, as
	// projection.Processor.Generations does: it loads the processor's view
	// of them first, which records the projection's first generation and
	// retires previous ones whose retention ended.
	Generations(ctx context.Context) ([]store.Generation, error)
	// Names returns the gate key and the read-model schema of generation
	// n of the projection.
	Names(n int) (key, schema string)
	// On returns the gate of one generation of the projection alone (gate
	// key key, read-model schema schema): no generation epoch to check, no
	// rebuild lock. A side-by-side replay hands it the events that do not
	// continue their aggregate; an in-place rebuild, which holds the
	// rebuild lock exclusively, replays the live generation through it.
	On(key, schema string) Target
	// Fed returns the gate a worker of the projection's code version runs
	// its batches through: every generation of the projection it feeds,
	// the generation epoch checked, the rebuild lock shared. The catch-up
	// runs its batches through it.
	Fed() (Processor, error)
	// Tables returns the projection's Tables, nil if it has none.
	Tables() Tables
	// Verify returns the projection's own check of a rebuilt generation
	// (projection.Description.Verify), nil if it has none.
	Verify() func(ctx context.Context, tx pgx.Tx) error
	// Inline returns the projection's inline table in schema, nil if the
	// projection is not inline.
	Inline(schema string) *InlineTable
	// Refused reports whether an error of Target.Apply is the projection's
	// handler, or the database, refusing the events — which the gate
	// isolates — rather than a failure of the transaction.
	Refused(err error) bool
	// Transient reports whether retrying a transaction that failed with
	// err can cure it (projection.IsTransient).
	Transient(err error) bool
}

// Processor runs batches through a gate, one transaction each, as
// projection.Processor.Process does; the rebuild needs no outcomes.
type Processor interface {
	Process(ctx context.Context, b Batch) error
}

// Target is the gate of one generation of a projection (Gate.On).
type Target interface {
	Processor
	// Prepare validates and sorts b's deliveries as the gate does before
	// its attempts.
	Prepare(b Batch) Prepared
	// Apply calls the projection's handler on events — whole aggregates,
	// each continuing its version — in tx, as one pipeline: the statements
	// head queues, the generation's schema put first on the search_path,
	// the handler's statements, the statements tail queues, the search_path
	// restored. No version row, applied log or parked event is touched:
	// that is the caller's. An error the handler or the database refuses
	// the events with satisfies Gate.Refused.
	Apply(ctx context.Context, tx pgx.Tx, events []aggregate.Event, head, tail func(*pgx.Batch)) error
}

// Tables is a projection's read model's tables (projection.Tables).
type Tables interface {
	Setup(ctx context.Context, tx pgx.Tx) error
	Reset(ctx context.Context, tx pgx.Tx) error
}

// Batch is one transaction's worth of deliveries for a gate
// (projection.Batch: the fields a rebuild sets).
type Batch struct {
	Events  []aggregate.Event
	Rejects []Reject
	Source  string
	// BeforeCommit, if set, runs in the batch's transaction before the
	// commit (projection.Batch.BeforeCommit).
	BeforeCommit func(ctx context.Context, tx pgx.Tx) error
}

// Reject is a delivery a source could not turn into a valid event
// (projection.Reject).
type Reject struct {
	Event aggregate.Event
	Err   error
}

// Prepared is a batch as the gate prepares it (Target.Prepare).
type Prepared struct {
	// Valid holds the valid deliveries sorted by aggregate (byte order),
	// version and position in the batch.
	Valid []Delivery
	// Aggregates are the distinct aggregates of Valid, in order.
	Aggregates []string
	// QueueRejected queues the recording of the batch's rejected
	// deliveries (its invalid events and its Rejects); nil when it has
	// none.
	QueueRejected func(b *pgx.Batch)
}

// Delivery is a valid delivery of a prepared batch.
type Delivery struct {
	Event aggregate.Event
	// ID is the event's stable id, nil when it is the default one
	// (aggregate.DefaultID).
	ID *string
	// Hash is the event's content hash (aggregate.Event.Hash).
	Hash []byte
}

// InlineTable is an inline projection's table in one generation's schema
// (projection.InlineTable).
type InlineTable struct {
	// Ref names the table and its columns, quoted, for the store's
	// statements.
	Ref store.InlineRef
	// Name is the table's own name, unqualified and unquoted; Log its log
	// column's.
	Name, Log string
}
