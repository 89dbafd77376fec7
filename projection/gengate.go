package projection

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection/internal/generation"
	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the gate as the rebuild reaches it: the seam between the
// processor and package internal/generation, which holds the rebuild
// (build.go has its public API and what it hands the rebuild). internal/generation applies events only
// through rebuildGate — a processor of one generation (On), the one a
// worker of the projection's code version runs (Fed), or the projection's
// handler inside the replay's transaction (genTarget.Apply) — and knows of
// the projection only what it says.

// rebuildGate is the gate of r's projection as a rebuild reaches it
// (generation.Gate).
type rebuildGate struct {
	p *Processor
	r *registered
}

// Generations implements generation.Gate: generationRows.
func (g rebuildGate) Generations(ctx context.Context) ([]store.Generation, error) {
	return g.p.generationRows(ctx, g.r.name)
}

// generationRows returns the rows of Generations: it loads the
// processor's view first (recording generation 1 if need be).
func (p *Processor) generationRows(ctx context.Context, projection string) ([]store.Generation, error) {
	if _, err := p.feeding(ctx); err != nil {
		return nil, err
	}
	var rows []store.Generation
	err := pgx.BeginTxFunc(ctx, p.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		rows, err = p.store.Generations.List(ctx, tx, projection)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("projection %s: list generations: %w", projection, err)
	}
	return rows, nil
}

// Names implements generation.Gate: generationKey, generationSchema.
func (g rebuildGate) Names(n int) (key, schema string) {
	return generationKey(g.r.name, n), generationSchema(g.p.cfg.Schema, g.r.name, n)
}

// On implements generation.Gate: a processor of the generation alone.
func (g rebuildGate) On(key, schema string) generation.Target {
	return genTarget{g.p.genProcessor(g.r, key, schema)}
}

// Fed implements generation.Gate: a processor as New makes it, of the
// projection alone.
func (g rebuildGate) Fed() (generation.Processor, error) {
	fp, err := g.p.feedProcessor(g.r)
	if err != nil {
		return nil, err
	}
	return genTarget{fp}, nil
}

// Tables implements generation.Gate.
func (g rebuildGate) Tables() generation.Tables {
	if t, ok := g.r.p.(Tables); ok {
		return t
	}
	return nil
}

// Verify implements generation.Gate: Description.Verify.
func (g rebuildGate) Verify() func(ctx context.Context, tx pgx.Tx) error {
	return describe(g.r.p).Verify
}

// Inline implements generation.Gate.
func (g rebuildGate) Inline(schema string) *generation.InlineTable {
	t := inlineTableIn(g.r.p, schema)
	if t == nil {
		return nil
	}
	return &generation.InlineTable{Ref: t.ref(), Name: t.Table[len(t.Table)-1], Log: t.Log}
}

// Refused implements generation.Gate: a handler's failure (genTarget.Apply
// marks them) or the database refusing the data.
func (rebuildGate) Refused(err error) bool {
	var hf *handlerFailure
	return errors.As(err, &hf) || isRefusal(err)
}

// Transient implements generation.Gate: IsTransient.
func (rebuildGate) Transient(err error) bool { return IsTransient(err) }

// genProcessor returns a processor that feeds one generation of r's
// projection (gate key key, read-model schema schema): no generation epoch
// to check, no rebuild lock.
func (p *Processor) genProcessor(r *registered, key, schema string) *Processor {
	nr := &registered{name: r.name, key: key, generation: keyGeneration(r.name, key), schema: schema, version: r.version, p: r.p, event: r.event, batch: r.batch,
		lockKey: r.lockKey, stats: &counters{}}
	return p.derive(nr)
}

// feedProcessor returns a processor of r's projection alone that feeds
// the generations a worker of its code version feeds (the generation
// epoch checked, the rebuild lock shared), with p's configuration but
// Owner: it writes as another writer would. Nothing closes it, and a lease
// it took would stay held as long as the pool's connection for it: no
// owner could take the key over, and no writer vacate it.
func (p *Processor) feedProcessor(r *registered) (*Processor, error) {
	cfg := p.cfg
	cfg.Owner = false
	fp, err := New(p.pool, &cfg, r.p)
	if err != nil {
		return nil, fmt.Errorf("catch-up processor: %w", err)
	}
	return fp, nil
}

// genTarget is a processor as a rebuild uses it (generation.Target): for
// Apply, of one registration.
type genTarget struct{ p *Processor }

// Process implements generation.Processor: Processor.Process.
func (t genTarget) Process(ctx context.Context, b generation.Batch) error {
	var rejects []Reject
	if len(b.Rejects) > 0 {
		rejects = make([]Reject, len(b.Rejects))
		for i, r := range b.Rejects {
			rejects[i] = Reject(r)
		}
	}
	_, err := t.p.Process(ctx, Batch{Events: b.Events, Rejects: rejects, Source: b.Source, BeforeCommit: b.BeforeCommit})
	return err
}

// Prepare implements generation.Target: Processor.prepare.
func (t genTarget) Prepare(b generation.Batch) generation.Prepared {
	rejects := make([]Reject, len(b.Rejects))
	for i, r := range b.Rejects {
		rejects[i] = Reject(r)
	}
	bt := t.p.prepare(Batch{Events: b.Events, Rejects: rejects, Source: b.Source})
	out := generation.Prepared{Valid: make([]generation.Delivery, len(bt.valid)), Aggregates: bt.aggs}
	for i := range bt.valid {
		d := &bt.valid[i]
		out.Valid[i] = generation.Delivery{Event: d.ev, Hash: d.hash}
		if !isDefaultID(d.id, d.ev.Aggregate, d.ev.Version) {
			out.Valid[i].ID = &d.id
		}
	}
	if len(bt.rejected) > 0 {
		out.QueueRejected = func(q *pgx.Batch) { t.p.queueRejected(q, bt.rejected) }
	}
	return out
}

// Apply implements generation.Target: the handler of the processor's one
// registration, called as the gate calls it, its failures (and those of
// the pipeline that carried its statements) marked as a handlerFailure.
func (t genTarget) Apply(ctx context.Context, tx pgx.Tx, events []aggregate.Event, head, tail func(*pgx.Batch)) error {
	r := t.p.projs[0]
	ht := newTx(tx, r.name)
	head(ht.batch)
	r.enterSchema(ht)
	if err := t.p.callHandler(ctx, ht, r, events); err != nil {
		return &handlerFailure{projection: r.name, err: err}
	}
	ht.finish()
	tail(ht.batch)
	r.leaveSchema(ht)
	if err := ht.Flush(ctx); err != nil {
		return &handlerFailure{projection: r.name, err: err}
	}
	if err := ht.inlineShort(r.name); err != nil {
		return &handlerFailure{projection: r.name, err: err}
	}
	return nil
}
