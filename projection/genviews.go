package projection

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the operator view of generations: what Status, the
// rebuild commands, the HTTP API and the metrics show.

// generationOf returns the operator view of a generations row.
func generationOf(g store.Generation) Generation {
	return Generation{Projection: g.Projection, Generation: g.Generation, CodeVersion: g.CodeVersion, Key: g.Key, Schema: g.Schema,
		State: g.State, Phase: g.Phase, Position: g.Position, PositionTime: g.PositionTime, Events: g.Events, Error: g.Error,
		KeepUntil: g.KeepUntil, CreatedAt: g.CreatedAt, UpdatedAt: g.UpdatedAt, LiveAt: g.LiveAt, EndedAt: g.EndedAt}
}

// generationsOf returns the operator view of generations rows.
func generationsOf(rows []store.Generation) []Generation {
	if rows == nil {
		return nil
	}
	out := make([]Generation, len(rows))
	for i, g := range rows {
		out[i] = generationOf(g)
	}
	return out
}

// queueGenerations queues the read of the generations of projections that
// are not dropped.
func (p *Processor) queueGenerations(b *pgx.Batch, projections []string, into *[]Generation) {
	p.store.Generations.QueueList(b, projections, func(g store.Generation) { *into = append(*into, generationOf(g)) })
}

// Generations lists every generation of a projection, dropped ones
// included, oldest first. A projection that has never been rebuilt side by
// side has one: generation 1, live (recorded once a processor ran on
// migration 005).
func (p *Processor) Generations(ctx context.Context, projection string) ([]Generation, error) {
	if _, ok := p.byName[projection]; !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownProjection, projection)
	}
	if _, err := p.feeding(ctx); err != nil { // records generation 1 if need be
		return nil, err
	}
	var out []Generation
	var now time.Time
	err := pgx.BeginTxFunc(ctx, p.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		out = nil
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return err
		}
		rows, err := p.store.Generations.List(ctx, tx, projection)
		out = generationsOf(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("projection %s: list generations: %w", projection, err)
	}
	for i := range out {
		out[i].setLag(now)
	}
	p.generationsApplied(ctx, out, nil)
	return out, nil
}

// Unfed returns the processor's projections of which it feeds no
// generation: none that is live or in catch-up has its projection's code
// version (a new version was deployed). A Build of such a projection by this
// processor builds the generation of its version — or resumes it, or waits
// for another process building it.
func (p *Processor) Unfed(ctx context.Context) ([]string, error) {
	gv, err := p.feeding(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for i, r := range p.projs {
		if gv.report != nil && gv.report[i] < 0 {
			out = append(out, r.name)
		}
	}
	return out, nil
}

// FedGeneration is a generation a processor feeds.
type FedGeneration struct {
	Projection string `json:"projection"`
	Generation int    `json:"generation"`
}

// Fed returns the generations the processor feeds — those of its
// projections' code versions that are live, in catch-up or previous — by
// projection and generation. A worker that feeds them exports them
// (metrics: inorder_generation_fed): a live generation no running worker
// feeds stops moving.
func (p *Processor) Fed(ctx context.Context) ([]FedGeneration, error) {
	gv, err := p.feeding(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]FedGeneration, 0, len(gv.proc.projs))
	for _, r := range gv.proc.projs {
		out = append(out, FedGeneration{Projection: r.name, Generation: r.generation})
	}
	slices.SortFunc(out, func(a, b FedGeneration) int {
		return cmp.Or(strings.Compare(a.Projection, b.Projection), cmp.Compare(a.Generation, b.Generation))
	})
	return out, nil
}
