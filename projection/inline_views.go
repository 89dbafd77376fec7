package projection

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds what the operator views read of inline projections'
// rows: an aggregate's version is the later of its version row's and its
// row's (the fast path writes the row only), and the applied log of its
// recent versions is the row's log.

// inlineView returns the inline table of the live generation of the
// projection, or nil if it is not inline.
func (p *Processor) inlineView(ctx context.Context, projection string) *InlineTable {
	r, err := p.liveTarget(ctx, projection)
	if err != nil {
		r = p.byName[projection]
	}
	if r == nil {
		return nil
	}
	return r.inlineTable()
}

// inlineViewOf returns the inline table of generation n of the projection
// (0: the live one), or nil if it is not inline or the processor does not
// feed that generation (its version rows are then all there is to read).
func (p *Processor) inlineViewOf(ctx context.Context, projection string, n int) *InlineTable {
	if n == 0 {
		return p.inlineView(ctx, projection)
	}
	r, err := p.target(ctx, projection, n)
	if err != nil {
		return nil
	}
	return r.inlineTable()
}

// refOf returns t's ref, nil for a projection without an inline table.
func refOf(t *InlineTable) *store.InlineRef {
	if t == nil {
		return nil
	}
	r := t.ref()
	return &r
}

// ref returns t's table and columns, quoted, for package store's
// statements.
func (t *InlineTable) ref() store.InlineRef {
	return store.InlineRef{Table: t.Table.Sanitize(), Key: pgx.Identifier{t.Key}.Sanitize(),
		Version: pgx.Identifier{t.Version}.Sanitize(), Log: pgx.Identifier{t.Log}.Sanitize()}
}

// inlineAppliedLog lists the applied log of inline projection key (a gate
// key) from its rows' logs and the applied table (versions that operator
// actions recorded), for the aggregates of opts, in aggregate and version
// order.
func (p *Processor) inlineAppliedLog(ctx context.Context, t *InlineTable, opts ListOptions) ([]AppliedEntry, error) {
	rows, err := p.store.Applied.ListInlineLog(ctx, p.pool, opts.Projection, t.ref(), inlineEntrySize, opts.page())
	if err != nil {
		return nil, fmt.Errorf("projection: list applied log: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (AppliedEntry, error) {
		a := AppliedEntry{Projection: opts.Projection}
		var id *string
		var inline bool
		var h []byte
		if err := row.Scan(&a.Aggregate, &a.Version, &id, &h, &inline); err != nil {
			return a, err
		}
		if inline {
			a.Entry = h
		} else {
			a.EventID, a.Hash = *id, h
		}
		return a, nil
	})
}
