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

// ref returns t's table and columns, quoted, for package store's
// statements.
func (t *InlineTable) ref() store.InlineRef {
	return store.InlineRef{Table: t.Table.Sanitize(), Key: pgx.Identifier{t.Key}.Sanitize(),
		Version: pgx.Identifier{t.Version}.Sanitize(), Log: pgx.Identifier{t.Log}.Sanitize()}
}

// versionJoin returns, for the versions table aliased v, the expression of
// an aggregate's version and the join that it needs: for an inline
// projection, the later of v's and its row's.
func versionJoin(t *InlineTable) (expr, join string) {
	if t == nil {
		return "v.version", ""
	}
	k, ver := pgx.Identifier{t.Key}.Sanitize(), pgx.Identifier{t.Version}.Sanitize()
	return "greatest(v.version, coalesce(i." + ver + ", 0))",
		" LEFT JOIN " + t.Table.Sanitize() + " i ON i." + k + " = v.aggregate"
}

// inlineVersionSQL returns a query of the version of aggregate $2 in the
// projection whose gate key is keySQL, with t its inline table (nil if it
// has none).
func (p *Processor) inlineVersionSQL(t *InlineTable, keySQL string) string {
	sql := `SELECT version FROM ` + p.table("versions") + ` WHERE projection = ` + keySQL + ` AND aggregate = $2`
	if t == nil {
		return sql
	}
	// The later of the version row's and the projection row's, either of
	// which may be missing (an aggregate with only parked events has no
	// row yet).
	return `SELECT greatest(coalesce((` + sql + `), 0), coalesce((SELECT ` + pgx.Identifier{t.Version}.Sanitize() +
		` FROM ` + t.Table.Sanitize() + ` WHERE ` + pgx.Identifier{t.Key}.Sanitize() + ` = $2), 0))`
}

// inlineAppliedLog lists the applied log of inline projection key (a gate
// key) from its rows' logs and the applied table (versions that operator
// actions recorded), for the aggregates of opts, in aggregate and version
// order.
func (p *Processor) inlineAppliedLog(ctx context.Context, t *InlineTable, opts ListOptions) ([]AppliedEntry, error) {
	k, ver, lg := pgx.Identifier{t.Key}.Sanitize(), pgx.Identifier{t.Version}.Sanitize(), pgx.Identifier{t.Log}.Sanitize()
	rows, err := p.pool.Query(ctx, `WITH r AS (
  SELECT `+k+` AS aggregate, `+ver+` AS version, `+lg+` AS log FROM `+t.Table.Sanitize()+`
  WHERE ($2 = '' OR `+k+` = $2) AND `+k+` COLLATE "C" > $3 ORDER BY `+k+` COLLATE "C" LIMIT $4)
SELECT * FROM (
SELECT r.aggregate, r.version - n + 1 AS version, NULL::text AS event_id, substring(r.log FROM octet_length(r.log) / `+fmt.Sprint(inlineEntrySize)+` * `+fmt.Sprint(inlineEntrySize)+` - `+fmt.Sprint(inlineEntrySize)+` * n + 1 FOR `+fmt.Sprint(inlineEntrySize)+`) AS hash, true AS inline
FROM r, generate_series(1, octet_length(r.log) / `+fmt.Sprint(inlineEntrySize)+`) AS n
UNION ALL
SELECT a.aggregate, a.version, a.event_id, a.hash, false FROM `+p.table("applied")+` a
WHERE a.projection = $1 AND a.aggregate IN (SELECT aggregate FROM r)
  AND NOT EXISTS (SELECT 1 FROM r WHERE r.aggregate = a.aggregate AND a.version > r.version - octet_length(r.log) / `+fmt.Sprint(inlineEntrySize)+` AND a.version <= r.version)) u
ORDER BY u.aggregate COLLATE "C", u.version`, opts.Projection, opts.Aggregate, opts.After, opts.limit())
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
