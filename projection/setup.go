package projection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/buffer"
	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/migrations"
	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the processor's making and the calls on it that are not
// batches: New, which checks and registers the projections, Ping and
// Setup, which migrates inorder's tables and sets the projections up.

// New returns a processor for projections, on the tables of cfg.Schema in
// pool's database (see package migrations for creating them).
func New(pool *pgxpool.Pool, cfg *Config, projections ...Projection) (*Processor, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	c := *cfg
	c.Schema = cmp.Or(c.Schema, migrations.DefaultSchema)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, DefaultRetryBackoff)
	c.MaxRetryTime = cmp.Or(c.MaxRetryTime, DefaultMaxRetryTime)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if err := c.Limits.Check(); err != nil {
		return nil, fmt.Errorf("projection: %w", err)
	}
	if len(projections) == 0 {
		return nil, errors.New("projection: New needs at least one projection")
	}
	p := &Processor{
		shared: shared{
			pool:   pool,
			cfg:    c,
			policy: retry.Policy{Initial: c.RetryBackoff, MaxElapsed: c.MaxRetryTime},
			tracer: c.tracer(),
			log:    c.Logger,
			buf:    buffer.New(c.Schema),
			store:  store.New(c.Schema),

			vacancies: newVacancies(),
		},
		byName:    make(map[string]*registered),
		pauseLock: true,
		gens:      &genCache{stats: map[string]*counters{}},
	}
	for _, pr := range projections {
		r := &registered{name: pr.Name(), key: pr.Name(), generation: 1, p: pr, version: codeVersion(pr), stats: &counters{}}
		switch {
		case r.name == "":
			return nil, errors.New("projection: a projection has an empty name")
		case len(r.name) > MaxProjectionName:
			return nil, fmt.Errorf("projection: the name %.32q… is longer than %d bytes", r.name, MaxProjectionName)
		}
		if _, dup := p.byName[r.name]; dup {
			return nil, fmt.Errorf("projection: two projections are named %q", r.name)
		}
		if bh, ok := pr.(BatchHandler); ok {
			r.batch = bh
		} else if eh, ok := pr.(EventHandler); ok {
			r.event = eh
		} else {
			return nil, fmt.Errorf("projection %s: implements neither EventHandler nor BatchHandler", r.name)
		}
		r.lockKey = advisoryKey(c.Schema, r.name)
		p.byName[r.name] = r
		p.projs = append(p.projs, r)
	}
	if err := checkKeys(p.byName); err != nil {
		return nil, err
	}
	if len(p.cfg.Limits.Types) == 0 {
		p.cfg.Limits.Types = acceptedTypes(projections)
	}
	// A fixed order of projections keeps lock order the same in every process.
	sort.Slice(p.projs, func(a, b int) bool { return p.projs[a].name < p.projs[b].name })
	for i, r := range p.projs {
		r.index = i
	}
	if c.Owner {
		p.owner = newOwner(p)
	}
	return p, nil
}

// Close ends the leases of a processor with Config.Owner (their rows
// vacated, so that other writers stop waiting on them) and closes their
// connection; it does nothing for the others. Call it once the last
// Process call returned; batches after it run unowned.
func (p *Processor) Close(ctx context.Context) error {
	return p.owner.close(ctx)
}

// Ping checks that the processor's database answers.
func (p *Processor) Ping(ctx context.Context) error {
	if err := p.pool.Ping(ctx); err != nil {
		return fmt.Errorf("projection: ping: %w", err)
	}
	return nil
}

// Setup prepares the database for the processor, so that it is the one
// call needed before Process: it applies inorder's pending migrations to
// [Config].Schema, creating the schema if it is missing (as
// [migrations.Migrator.Migrate] does), then runs Setup of every projection
// that implements [Tables], in one transaction. It is idempotent and safe
// to call from any number of processes at once.
//
// Migrating holds the migrator's advisory lock on the schema, so concurrent
// calls apply each migration once: the others wait, then find nothing to
// do. On a schema with every migration applied, Setup only reads its
// tracking table: it takes no migration lock and needs no CREATE privilege
// on inorder's schema. A pending offline migration is not applied while
// other inorder workers of the schema are connected: Setup then returns an
// error wrapping [migrations.ErrWorkersConnected] (an
// [*migrations.OfflineError] naming the workers), applies nothing and runs
// no projection's Setup; stop the workers, or apply the migration with
// [migrations.Options].Force (inorder migrate --force), and call Setup
// again. A schema a newer release migrated fails with an error wrapping
// [migrations.ErrUnknownVersion], unless that release recorded its
// migrations as online (a rolling upgrade). Dry runs, forced and
// transactional migrations are package migrations' own (or the inorder
// migrate command's), run before Setup.
//
// The projections' Setup calls are serialised by an advisory lock too:
// CREATE TABLE IF NOT EXISTS run at the same time by two transactions fails
// in one of them.
func (p *Processor) Setup(ctx context.Context) error {
	if err := p.migrate(ctx); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('inorder.setup', 0))`); err != nil {
			return fmt.Errorf("projection: setup lock: %w", err)
		}
		for _, r := range p.projs {
			if s, ok := r.p.(Tables); ok {
				if err := s.Setup(ctx, tx); err != nil {
					return fmt.Errorf("projection %s: %w", r.name, err)
				}
			}
		}
		return nil
	})
}

// migrate applies inorder's pending migrations to the processor's schema;
// when there are none, it only reads the migrations' status.
func (p *Processor) migrate(ctx context.Context) error {
	m, err := migrations.New(p.pool, &migrations.Options{Schema: p.cfg.Schema, Logger: p.log})
	if err != nil {
		return fmt.Errorf("projection: setup: %w", err)
	}
	status, err := m.Status(ctx)
	if err != nil {
		return fmt.Errorf("projection: setup: %w", err)
	}
	if migrated(status) {
		return nil
	}
	if _, err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("projection: setup: migrate schema %s: %w", p.cfg.Schema, err)
	}
	return nil
}

// migrated reports whether status shows every migration of this binary
// applied and none unknown to it but those a newer release recorded as
// online: what Migrate would find nothing to do on.
func migrated(status []migrations.Status) bool {
	for _, s := range status {
		if !s.Applied || s.Unknown && !s.Online {
			return false
		}
	}
	return true
}

// acceptedTypes returns the union of the projections' types, sorted, when
// every projection lists its types (Description.Types); else nil (every
// type is accepted).
func acceptedTypes(projections []Projection) []string {
	var types []string
	for _, pr := range projections {
		t := describe(pr).Types
		if len(t) == 0 {
			return nil
		}
		types = append(types, t...)
	}
	slices.Sort(types)
	return slices.Compact(types)
}
