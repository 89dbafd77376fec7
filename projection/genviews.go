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

// Generation is one generation of a projection, as operators see it.
type Generation struct {
	Projection string `json:"projection"`
	// Generation numbers the projection's generations from 1.
	Generation int `json:"generation"`
	// CodeVersion is the projection's code version that builds and feeds
	// it (see Description.Version).
	CodeVersion int `json:"code_version"`
	// Key is the projection column of its gate rows (the projection's name
	// for generation 1, "<name>@<n>" after).
	Key string `json:"key"`
	// Schema holds its read-model tables; empty for generation 1, whose
	// tables are in the connection's search_path.
	Schema string `json:"schema,omitempty"`
	// State is one of StateBuilding, StateCatchUp, StateLive,
	// StatePrevious, StateFailed, StateRetired, StateDropped.
	State string `json:"state"`
	// Phase refines State while a rebuild works on it: PhaseReplay,
	// PhaseFinalize, PhaseCatchUp, PhaseVerify, PhaseSwitch.
	Phase string `json:"phase,omitempty"`
	// Position is how far the rebuild read the stream (the source's
	// position, opaque), PositionTime the source's time of the event
	// there, Events how many events the rebuild read (0 for a generation
	// no rebuild built: see Applied).
	Position     Position  `json:"position,omitempty"`
	PositionTime time.Time `json:"position_time,omitzero"`
	Events       int64     `json:"events"`
	// Applied is the events applied in the generation — the sum of its
	// aggregates' versions, as ProjectionStatus.Events — whoever applied
	// them (its rebuild or the workers). Status and Generations set it
	// (nil for a dropped generation, or when its rows could not be read).
	Applied *int64 `json:"applied,omitempty"`
	// Lag is, while the generation is built, the age of the last event the
	// rebuild read (now - PositionTime): how far behind the stream it is.
	// Zero otherwise: the workers' lag is the source's to report.
	Lag        time.Duration `json:"-"`
	LagSeconds float64       `json:"lag_seconds"`
	// Error says why verification failed (StateFailed).
	Error string `json:"error,omitempty"`
	// KeepUntil is when a previous generation stops being fed (retired).
	KeepUntil time.Time `json:"keep_until,omitzero"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// LiveAt is when it was last switched in; EndedAt when it stopped being
	// fed for good (failed, retired, dropped).
	LiveAt  time.Time `json:"live_at,omitzero"`
	EndedAt time.Time `json:"ended_at,omitzero"`
}

// setLag computes Lag as of now.
func (g *Generation) setLag(now time.Time) {
	g.Lag, g.LagSeconds = 0, 0
	if (g.State == StateBuilding || g.State == StateCatchUp) && !g.PositionTime.IsZero() {
		g.Lag = max(now.Sub(g.PositionTime), 0)
		g.LagSeconds = g.Lag.Seconds()
	}
}

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
