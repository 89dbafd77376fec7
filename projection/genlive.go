package projection

import (
	"context"
	"fmt"
)

// This file holds the live generation of a projection (generations.go), as
// operator actions reach it: its registration. The statements that find its
// gate key and schema in a reader's snapshot are internal/store's
// (Generations.LiveKey, Generations.EnterLive).

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
