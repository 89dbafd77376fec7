package projection

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inorder/inorder/aggregate"
)

// Projection is a read model fed by events. Every projection implements
// Name and one of EventHandler or BatchHandler; it may also implement
// Tables, Describer, Reader and Inline (the package documentation's
// "Projections" has the table of what each is for).
type Projection interface {
	// Name identifies the projection; its version state is kept under it.
	// It must be stable across releases and unique within a Processor.
	Name() string
}

// EventHandler is the per-event projection API. Apply is called once per
// event to apply, in version order per aggregate, inside the transaction that
// also advances the aggregate's version. Statements queued with Tx.Queue are
// pipelined: the processor sends the statements of every event of the
// transaction in one round trip.
//
// Apply must not commit or roll back. An error makes the processor retry the
// transaction; if it persists, the failing event is quarantined.
type EventHandler interface {
	Projection
	Apply(ctx context.Context, tx *Tx, e aggregate.Event) error
}

// BatchHandler is the set-based projection API for hot projections.
// ApplyBatch receives, per transaction, every event to apply: already
// validated, gated and deduplicated, ordered by aggregate and, within an
// aggregate, by version, with no gaps. It writes them with set-based SQL
// (unnest, COPY) through tx.
//
// If ApplyBatch fails persistently the processor isolates the failing
// aggregate and version by calling it again with smaller slices under
// savepoints, and quarantines only that event.
type BatchHandler interface {
	Projection
	ApplyBatch(ctx context.Context, tx *Tx, events []aggregate.Event) error
}

// Tables is implemented by projections that own read-model tables: Setup
// creates them, Reset empties them. A projection that does not implement
// Tables cannot be rebuilt in place (ErrNotResettable).
type Tables interface {
	// Setup creates the read model's tables. It must be idempotent
	// (CREATE TABLE IF NOT EXISTS …): Processor.Setup calls it at every
	// start, and a side-by-side rebuild calls it in the new generation's
	// schema.
	Setup(ctx context.Context, tx pgx.Tx) error
	// Reset empties the read model (TRUNCATE or DELETE) so the stream can
	// be replayed into it: an in-place rebuild (BuildOptions.InPlace)
	// calls it, and Processor.DropGeneration on a generation without a
	// schema of its own.
	Reset(ctx context.Context, tx pgx.Tx) error
}

// Describer is implemented by projections that declare more than their
// name and handler: the event types they handle, the version of their code,
// what they do when versions will never be applied, and how to check their
// read model. The processor calls Describe whenever it needs one of these;
// it must return the same Description every time. A projection that does
// not implement Describer is described by the zero Description.
type Describer interface {
	Projection
	Describe() Description
}

// Description is what a Describer declares. Its zero value is the default
// of every field: every event type accepted, code version 1, no gap
// handling, no verification.
type Description struct {
	// Types lists the event types the projection handles. When every
	// projection of a processor lists its types and Config.Limits.Types is
	// empty, the processor accepts the union of their types and rejects
	// every other type before any handler sees it (aggregate.ErrUnknownType,
	// reason "unknown_type"): recorded as rejected, neither retried nor
	// quarantined, replayable once a projection accepts it. Empty: the
	// projection does not list its types, and the processor accepts every
	// type.
	Types []string

	// Version is the version of the projection's code: raise it whenever
	// what the projection computes from the events changes, and rebuild. A
	// processor feeds only the generations built by its projection's code
	// version (see the package documentation, Generations). Below 1 (the
	// default): version 1.
	Version int

	// Gap, when set, is told when versions of an aggregate will never be
	// applied: an operator declared them missing (Processor.DeclareGap) or
	// skipped a quarantined event (Processor.SkipQuarantined). It is called
	// in the operator action's transaction, after the aggregate's version
	// row is locked and before the versions after the gap are applied, so
	// the projection can make its read model take them (the ledger, whose
	// payments check that versions follow each other, moves the payment's
	// version past the gap). An error fails the operator action, which then
	// changes nothing. Nil: the projection is not told.
	Gap func(ctx context.Context, tx *Tx, g Gap) error

	// Verify, when set, checks the projection's read model before a new
	// generation is switched in. It runs in a REPEATABLE READ transaction
	// whose search_path starts with the generation's schema; an error keeps
	// the live generation and marks the new one failed, with the error as
	// the reason. It must only read. Nil: only the gate's own checks run.
	Verify func(ctx context.Context, tx pgx.Tx) error
}

// describe returns p's Description: the zero one when p is not a
// Describer.
func describe(p Projection) Description {
	if d, ok := p.(Describer); ok {
		return d.Describe()
	}
	return Description{}
}

// Gap is versions of an aggregate that will never be applied.
type Gap struct {
	Aggregate string
	// From and To bound the missing versions; the aggregate stands at
	// From-1 and its next version is To+1.
	From, To int64
	// Action is "declare-gap" or "skip".
	Action string
	// Reason is the operator's, as recorded in the operator log.
	Reason string
}

// Tx is the transaction handed to handlers. Queue adds a statement to the
// pipeline; Exec, Query and QueryRow first send what is queued, then run
// directly. Use Queue for writes whose result you do not need: that is what
// makes the per-event API fast.
type Tx struct {
	tx         pgx.Tx
	batch      *pgx.Batch
	projection string
	inline     *inlineTx // the runs of an inline projection's handler
	// deferred are the Sums of TxSums, by table: queued by finish, once
	// the handler's last call returned, in table order.
	deferred map[string]deferredSums
}

// inlineTx is the inline state of a handler's Tx.
type inlineTx struct {
	runs []InlineRun
	// event is the run of the event an EventHandler's Apply is given (-1
	// for a BatchHandler, which is given every run).
	event int
	// want is the rows the handler must write through QueueInline; got
	// those it wrote (known once the queued statements are sent).
	want, got int64
}

// deferredSums is a Sums[K] of any K.
type deferredSums interface{ queueOn(*Tx) }

// finish queues what the handler's calls left for the end of the
// transaction: the Sums of TxSums, table by table in name order, each in
// key order. The processor calls it after the handler's last call, before
// its last Flush.
func (t *Tx) finish() {
	if len(t.deferred) == 0 {
		return
	}
	tables := make([]string, 0, len(t.deferred))
	for k := range t.deferred {
		tables = append(tables, k)
	}
	slices.Sort(tables)
	for _, k := range tables {
		t.deferred[k].queueOn(t)
	}
	clear(t.deferred)
}

func newTx(tx pgx.Tx, projection string) *Tx {
	return &Tx{tx: tx, batch: &pgx.Batch{}, projection: projection}
}

// Projection returns the name of the projection whose handler holds the
// transaction.
func (t *Tx) Projection() string { return t.projection }

// Queue adds a statement to the pipeline. Its error, if any, surfaces when
// the pipeline is sent, and fails the transaction. To read its result, set
// a callback on the returned statement (QueryRow, Query or Exec): it runs
// when the pipeline is sent — by Flush, by Exec, Query, QueryRow, CopyFrom
// or Tx, or by the processor after the handler returns — in the order the
// statements were queued, and its error fails the send.
func (t *Tx) Queue(sql string, args ...any) *pgx.QueuedQuery { return t.batch.Queue(sql, args...) }

// Flush sends the queued statements now.
func (t *Tx) Flush(ctx context.Context) error {
	if t.batch.Len() == 0 {
		return nil
	}
	b := t.batch
	t.batch = &pgx.Batch{}
	// Each statement's result is read through a wrapper that notes the
	// first that failed: its text goes with the error (a deadlock's log
	// line names it).
	failed := -1
	for i, qq := range b.QueuedQueries {
		fn := qq.Fn
		qq.Fn = func(br pgx.BatchResults) error {
			var err error
			if fn != nil {
				err = fn(br)
			} else {
				_, err = br.Exec()
			}
			if err != nil && failed < 0 {
				failed = i
			}
			return err
		}
	}
	if err := t.tx.SendBatch(ctx, b).Close(); err != nil {
		if failed >= 0 {
			err = &StatementError{SQL: b.QueuedQueries[failed].SQL, Err: err}
		}
		return fmt.Errorf("projection: pipelined statements: %w", err)
	}
	return nil
}

// Exec sends the queued statements, then executes sql.
func (t *Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.Flush(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.tx.Exec(ctx, sql, args...)
}

// Query sends the queued statements, then runs the query.
func (t *Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.Flush(ctx); err != nil {
		return nil, err
	}
	return t.tx.Query(ctx, sql, args...)
}

// QueryRow sends the queued statements, then runs the query.
func (t *Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.Flush(ctx); err != nil {
		return errRow{err}
	}
	return t.tx.QueryRow(ctx, sql, args...)
}

// CopyFrom sends the queued statements, then runs COPY FROM.
func (t *Tx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.Flush(ctx); err != nil {
		return 0, err
	}
	return t.tx.CopyFrom(ctx, table, columns, src)
}

// Tx sends the queued statements and returns the underlying transaction, for
// code that needs the full pgx.Tx API. Do not commit or roll it back.
func (t *Tx) Tx(ctx context.Context) (pgx.Tx, error) {
	if err := t.Flush(ctx); err != nil {
		return nil, err
	}
	return t.tx, nil
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
