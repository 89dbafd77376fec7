package projection

import (
	"context"
	"fmt"
)

// This file holds the live generation of a projection (generations.go), as
// readers and operator actions reach it: its registration, its gate key and
// its schema.

// liveTarget returns the registration of a projection's live generation
// for an operator action, which needs its gate key, its schema and a
// handler of its code version: ErrNotFed when this processor does not feed
// it.
func (p *Processor) liveTarget(ctx context.Context, projection string) (*registered, error) {
	r, ok := p.byName[projection]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownProjection, projection)
	}
	gv, err := p.feeding(ctx)
	if err != nil {
		return nil, err
	}
	if gv.epoch == 0 { // fixed registrations
		return r, nil
	}
	t := gv.live[projection]
	if t == nil {
		g := gv.rows[projection]
		return nil, fmt.Errorf("projection %s: generation %d (code version %d) is live and this process runs code version %d: %w",
			projection, g.generation, g.codeVersion, r.version, ErrNotFed)
	}
	return t, nil
}

// liveKeySQL is an expression for the gate key of the live generation of
// the projection named by the parameter $n.
func (p *Processor) liveKeySQL(n int) string {
	return fmt.Sprintf(`coalesce((SELECT key FROM %s WHERE projection = $%d AND state = 'live'), $%d)`, p.table("generations"), n, n)
}

// liveSchemaSQL is a statement that puts the schema of the live generation
// of projection $1 first on the transaction's search_path (nothing for
// generation 1, whose tables are in the connection's search_path).
func (p *Processor) liveSchemaSQL() string {
	return `SELECT set_config('search_path',
  CASE WHEN current_setting('search_path') = '' THEN quote_ident(schema)
       ELSE quote_ident(schema) || ', ' || current_setting('search_path') END, true)
FROM ` + p.table("generations") + ` WHERE projection = $1 AND state = 'live' AND schema <> ''`
}
