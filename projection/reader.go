package projection

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// This file holds the read side: the optional Reader interface a projection
// implements to serve its read model (package httpapi serves it over HTTP),
// and the processor's read helpers built on it.

// Querier runs read queries. *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DefaultReadLimit is the page size of Reader.List when ListQuery.Limit is
// not positive.
const DefaultReadLimit = 50

// ListQuery selects one page of read models for Reader.List.
type ListQuery struct {
	// Filters maps filter names, each one of the Reader's Filters, to the
	// value a read model must have exactly. A nil map filters nothing.
	Filters map[string]string
	// After is the page cursor: only aggregates whose id sorts strictly
	// after it (in byte order, as Go compares strings and Postgres' COLLATE
	// "C") are listed. Empty starts at the beginning.
	After string
	// Limit caps the items returned; DefaultReadLimit when not positive.
	Limit int
}

// PageSize returns q.Limit, or DefaultReadLimit when it is not positive.
func (q ListQuery) PageSize() int {
	if q.Limit <= 0 {
		return DefaultReadLimit
	}
	return q.Limit
}

// Reader is implemented by projections that serve their read model, one
// aggregate at a time and as filtered pages. It is optional: the processor
// never calls it; package httpapi does.
//
// Implementations must use parameterised SQL only: aggregate ids, filter
// values and cursors are untrusted input. They must be safe for concurrent
// use.
type Reader interface {
	// Get returns one aggregate's read model — a JSON-marshalable value —
	// with found false when the projection holds nothing for it.
	Get(ctx context.Context, q Querier, aggregate string) (v any, found bool, err error)

	// List returns up to opts.PageSize() read models that match every
	// filter of opts.Filters, ordered by aggregate id in byte order, with ids
	// strictly after opts.After. next is the cursor of the following page:
	// the last item's aggregate id when more items may follow, "" at the
	// end. A filter name not in Filters is an error wrapping
	// ErrUnknownFilter.
	List(ctx context.Context, q Querier, opts ListQuery) (items []any, next string, err error)

	// Filters names the filters List accepts (e.g. "status", "payer").
	Filters() []string
}

// Errors of the read side.
var (
	// ErrNoReader reports a read of a projection that does not implement
	// Reader.
	ErrNoReader = errors.New("projection does not implement Reader")
	// ErrUnknownFilter reports a ListQuery filter the Reader does not
	// declare.
	ErrUnknownFilter = errors.New("unknown filter")
)

// Reader returns the Reader of the named projection. The error wraps
// ErrUnknownProjection when the processor has no such projection, and
// ErrNoReader when it does not implement Reader.
func (p *Processor) Reader(projection string) (Reader, error) {
	r, ok := p.byName[projection]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownProjection, projection)
	}
	rd, ok := r.p.(Reader)
	if !ok {
		return nil, fmt.Errorf("projection %s: %w", projection, ErrNoReader)
	}
	return rd, nil
}

// AggregateView is one aggregate's read model together with the version it
// reflects.
type AggregateView struct {
	// Version is the aggregate's last applied version in the projection (0
	// when it has applied none).
	Version int64
	// Found is Reader.Get's found: false when the read model holds nothing
	// for the aggregate (Value is then nil).
	Found bool
	// Value is what Reader.Get returned.
	Value any
}

// ReadAggregate reads an aggregate's version and, through the projection's
// Reader, its read model, in one read-only REPEATABLE READ transaction: the
// processor commits a projection's writes and the version in one
// transaction, so the two always agree. It reads the projection's live
// generation, chosen in the same snapshot: a read never mixes two
// generations, also while one is switched in. Errors wrap
// ErrUnknownProjection or ErrNoReader when the projection cannot be read.
func (p *Processor) ReadAggregate(ctx context.Context, projection, aggregate string) (AggregateView, error) {
	rd, err := p.Reader(projection)
	if err != nil {
		return AggregateView{}, err
	}
	var view AggregateView
	// Before the transaction: finding the live generation may take
	// another connection.
	it := p.inlineView(ctx, projection)
	err = pgx.BeginTxFunc(ctx, p.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		p.store.Generations.QueueEnterLive(b, projection)
		b.Queue(p.store.Versions.VersionOf(refOf(it), p.store.Generations.LiveKey(1)),
			projection, aggregate).QueryRow(func(row pgx.Row) error {
			if err := row.Scan(&view.Version); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			return nil
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("version: %w", err)
		}
		var err error
		view.Value, view.Found, err = rd.Get(ctx, tx, aggregate)
		if err != nil {
			return fmt.Errorf("get: %w", err)
		}
		if !view.Found {
			view.Value = nil
		}
		return nil
	})
	if err != nil {
		return AggregateView{}, fmt.Errorf("projection %s: read %s: %w", projection, aggregate, err)
	}
	return view, nil
}

// ReadList reads one page of a projection's read models through its Reader
// (see Reader.List), in a read-only REPEATABLE READ transaction on the
// projection's live generation. Errors wrap ErrUnknownProjection or
// ErrNoReader when the projection cannot be read.
func (p *Processor) ReadList(ctx context.Context, projection string, q ListQuery) (items []any, next string, err error) {
	rd, err := p.Reader(projection)
	if err != nil {
		return nil, "", err
	}
	err = pgx.BeginTxFunc(ctx, p.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := p.store.Generations.EnterLive(ctx, tx, projection); err != nil {
			return fmt.Errorf("live generation: %w", err)
		}
		items, next, err = rd.List(ctx, tx, q)
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("projection %s: list: %w", projection, err)
	}
	return items, next, nil
}

var (
	_ Querier = pgx.Tx(nil)
	_ Querier = (*pgxpool.Pool)(nil)
	_ Querier = (*pgx.Conn)(nil)
)
