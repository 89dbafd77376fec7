package projection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/buffer"
	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the processor's read-only operator views: what the CLI's
// status, parked, quarantine, conflicts, rejected and oplog commands, the
// HTTP API and the metrics show. They return the view types of views.go.

// DefaultListLimit is the number of rows a listing returns when
// ListOptions.Limit is not positive.
const DefaultListLimit = 100

// ListOptions filters and pages the operator listings: the processor's
// (Parked, Quarantined, Conflicts, Rejected, OpLog…) and the effect
// intents' (package effects' Client.List). The zero value lists the first
// DefaultListLimit rows of every projection, payloads included. Each
// listing reads the fields its comment names and ignores the others.
type ListOptions struct {
	// Projection, when set, restricts the listing to one projection, which
	// must be one of the processor's (else ErrUnknownProjection). Rejected
	// deliveries belong to no projection and ignore it.
	Projection string
	// Generation, when positive, lists that generation of the projections
	// (of Projection, if set) instead of their live one (see
	// Processor.Generations); AllGenerations lists every generation. By
	// default the listings show the live generation of every projection:
	// what readers see and what operator actions act on by default. The
	// operator log ignores both unless Generation is set: it is history.
	Generation     int
	AllGenerations bool
	// Aggregate, when set, restricts the listing to one aggregate.
	Aggregate string
	// Limit caps the rows returned; default DefaultListLimit.
	Limit int
	// AfterID pages through listings whose rows have ids (conflicts,
	// rejected deliveries and the operator log, ordered by id): only rows
	// with a larger id are returned. Pass the last id of the previous page.
	// The other listings ignore it.
	AfterID int64
	// OlderThan, when positive, keeps only parked events (Parked, Waiting)
	// parked at least that long ago.
	OlderThan time.Duration
	// After pages through listings ordered by aggregate id (Aggregates,
	// AppliedLog): only aggregates whose id sorts after it in byte order
	// are listed. Pass the last aggregate of the previous page (for
	// AppliedLog, whose page may end inside an aggregate, drop that
	// aggregate's entries and pass the one before it).
	After string
	// Action, when set, restricts the operator log to one action.
	Action string
	// Open, when set, leaves acknowledged conflicts out of Conflicts and
	// resolved deliveries (replayed, dismissed, declared missing) out of
	// Rejected.
	Open bool
	// OmitPayloads leaves events' data and metadata out (nil): for
	// summaries, which must stay small whatever was delivered.
	OmitPayloads bool
	// State, Kind and Orphaned filter the effect intents (package
	// effects' Client.List, which also reads Projection and Limit, and
	// no other field); the processor's listings ignore them. State, when
	// set, keeps the intents in that state (one of effects.States, else an
	// error); Kind, when set, those of that kind; Orphaned those whose
	// executor died and that no River job will take up yet
	// (effects.Effect.Orphaned).
	State    string
	Kind     string
	Orphaned bool
}

// page returns o's paging for a listing's statement.
func (o ListOptions) page() store.Page {
	return store.Page{Aggregate: o.Aggregate, Limit: o.limit(), AfterID: o.AfterID, After: o.After, Open: o.Open, OmitPayloads: o.OmitPayloads}
}

func (o ListOptions) limit() int {
	if o.Limit <= 0 {
		return DefaultListLimit
	}
	return o.Limit
}

// checkFilter validates the projection filter of opts.
func (p *Processor) checkFilter(opts ListOptions) error {
	if opts.Projection == "" {
		return nil
	}
	if _, ok := p.byName[opts.Projection]; !ok {
		return fmt.Errorf("%w: %q", ErrUnknownProjection, opts.Projection)
	}
	return nil
}

// StatusOptions configures Processor.Status. A nil *StatusOptions is valid.
type StatusOptions struct {
	// NoTotals leaves ProjectionStatus.Aggregates and Events at zero: they
	// count the projection's aggregates, which is slow on large read models
	// and not what frequent callers (metrics scrapes) need.
	NoTotals bool
	// Entries is how many entries of each kind Status.Attention lists.
	// Default StatusEntries; negative lists none (the slices are empty).
	Entries int
	// TotalsMaxAge, when positive, lets the totals — Aggregates and Events
	// of each projection, Applied of each generation: sums over every
	// version row, a scan as long as the table — be up to that old: they
	// come from the processor's last reading (Status.TotalsAt says when),
	// read again in the background once stale; only the first call reads
	// them in line. Every other figure is read live. For pages and
	// endpoints that must answer in bounded time (the HTTP API's
	// /v1/status and the console use DefaultTotalsMaxAge). Default 0:
	// read now.
	TotalsMaxAge time.Duration
}

// DefaultTotalsMaxAge is the StatusOptions.TotalsMaxAge of /v1/status and
// the console.
const DefaultTotalsMaxAge = 10 * time.Second

// Status returns the operator summary: one entry per projection of the
// processor (including those that have seen nothing yet), the checkpoints
// and the rejected counts, read in one snapshot, and the oldest entries
// that wait for an operator.
func (p *Processor) Status(ctx context.Context, opts *StatusOptions) (Status, error) {
	if opts == nil {
		opts = &StatusOptions{}
	}
	if opts.TotalsMaxAge > 0 && !opts.NoTotals {
		return p.statusCachedTotals(ctx, *opts)
	}
	var st Status
	var keys []string // the gate key of each of st.Projections
	// Before the transaction: finding the live generations may take
	// another connection.
	inline := make([]*InlineTable, len(p.projs))
	for i, name := range p.Projections() {
		inline[i] = p.inlineView(ctx, name)
	}
	err := pgx.BeginTxFunc(ctx, p.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT now()`).QueryRow(func(row pgx.Row) error { return row.Scan(&st.Time) })
		// Each projection's figures are those of its live generation (gate
		// key n.key).
		p.store.Status.QueueProjectionCounts(b, p.Projections(), int64(math.MaxInt64), opts.NoTotals).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var s ProjectionStatus
				var key string
				if err := rows.Scan(&s.Name, &key, &s.Aggregates, &s.Events,
					&s.Quarantined, &s.Conflicts, &s.ConflictsAcknowledged); err != nil {
					return err
				}
				st.Projections = append(st.Projections, s)
				keys = append(keys, key)
			}
			return rows.Err()
		})
		// Inline projections' rows hold the versions their fast path
		// applied (inline_views.go), and an owner's aggregates have no
		// version row (owner.go).
		for i, name := range p.Projections() {
			t := inline[i]
			if t == nil || opts.NoTotals {
				continue
			}
			p.store.Versions.QueueAppliedSum(b, p.store.Generations.LiveKey(1), refOf(t), name, int64(math.MaxInt64)).QueryRow(func(row pgx.Row) error {
				var aggs, n int64
				if err := row.Scan(&aggs, &n); err != nil || i >= len(st.Projections) {
					return err
				}
				st.Projections[i].Aggregates, st.Projections[i].Events = aggs, n
				return nil
			})
		}
		p.store.Rejected.QueueCounts(b).
			QueryRow(func(row pgx.Row) error { return row.Scan(&st.Rejected.Total, &st.Rejected.Pending) })
		p.queueCheckpointViews(b, &st.Checkpoints)
		p.queueGenerations(b, p.Projections(), &st.Generations)
		p.store.Generations.QueueOthers(b, p.Projections()).QueryRow(func(row pgx.Row) error { return row.Scan(&st.Others) })
		// The parked counts, in the same snapshot, from the parked table's
		// owner.
		var parked []buffer.Stats
		p.buf.QueueStats(b, keys, func(ss []buffer.Stats) { parked = ss })
		leases := map[string]*Lease{}
		p.store.Owners.QueueHeld(b).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var key string
				var l Lease
				if err := rows.Scan(&key, &l.Holder, &l.Token, &l.OtherWrites, &l.TakenAt); err != nil {
					return err
				}
				leases[key] = &l
			}
			return rows.Err()
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		for i, key := range keys {
			st.Projections[i].Owner = leases[key]
		}
		byKey := make(map[string]buffer.Stats, len(parked))
		for _, ps := range parked {
			byKey[ps.Projection] = ps
		}
		for i, key := range keys {
			if ps, ok := byKey[key]; ok {
				s := &st.Projections[i]
				s.Parked, s.ParkedAggregates, s.OldestParked = ps.Events, ps.Aggregates, ps.Oldest
			}
		}
		return nil
	})
	if err != nil {
		return Status{}, fmt.Errorf("projection: status: %w", err)
	}
	for i := range st.Projections {
		if s := &st.Projections[i]; !s.OldestParked.IsZero() {
			s.OldestParkedAge = max(st.Time.Sub(s.OldestParked), 0)
			s.OldestParkedAgeSeconds = s.OldestParkedAge.Seconds()
		}
	}
	if opts.Entries >= 0 {
		lo := ListOptions{Limit: cmp.Or(opts.Entries, StatusEntries), Open: true, OmitPayloads: true}
		if st.Attention.Quarantined, err = p.Quarantined(ctx, lo); err != nil {
			return Status{}, err
		}
		if st.Attention.Conflicts, err = p.Conflicts(ctx, lo); err != nil {
			return Status{}, err
		}
		if st.Attention.Rejected, err = p.Rejected(ctx, lo); err != nil {
			return Status{}, err
		}
	}
	st.Attention.Quarantined = nonNil(st.Attention.Quarantined)
	st.Attention.Conflicts = nonNil(st.Attention.Conflicts)
	st.Attention.Rejected = nonNil(st.Attention.Rejected)
	st.Checkpoints = nonNil(st.Checkpoints)
	st.Generations = nonNil(st.Generations)
	for i := range st.Generations {
		st.Generations[i].setLag(st.Time)
	}
	if !opts.NoTotals {
		p.generationsApplied(ctx, st.Generations, st.Projections)
		st.TotalsAt = st.Time
	}
	st.Others = nonNil(st.Others)
	return st, nil
}

// generationsApplied sets the Applied count of each generation: its live
// one's from its projection's status, the others' from their own gate rows
// (and inline rows). A generation whose rows cannot be read (its schema
// went missing) keeps a nil Applied.
func (p *Processor) generationsApplied(ctx context.Context, gens []Generation, live []ProjectionStatus) {
	for i := range gens {
		g := &gens[i]
		if g.State == StateLive {
			for _, s := range live {
				if s.Name == g.Projection {
					n := s.Events
					g.Applied = &n
				}
			}
		}
		r := p.byName[g.Projection]
		if r == nil || g.Applied != nil || g.State == StateDropped {
			continue
		}
		n, err := p.store.Versions.AppliedSum(ctx, p.pool, g.Key, refOf(inlineTableIn(r.p, g.Schema)), int64(math.MaxInt64))
		if err != nil {
			p.log.DebugContext(ctx, "status: applied count of a generation", "projection", g.Projection, "generation", g.Generation, "error", err)
			continue
		}
		g.Applied = &n
	}
}

func (p *Processor) queueCheckpointViews(b *pgx.Batch, into *[]Checkpoint) {
	p.store.Checkpoints.QueueList(b, func(cps []store.Checkpoint) {
		for _, c := range cps {
			*into = append(*into, Checkpoint{Name: c.Name, Position: c.Position, UpdatedAt: c.UpdatedAt,
				Age: time.Duration(c.AgeSeconds * float64(time.Second)), AgeSeconds: c.AgeSeconds})
		}
	})
}

// Checkpoints lists the sources' checkpoints by name.
func (p *Processor) Checkpoints(ctx context.Context) ([]Checkpoint, error) {
	var out []Checkpoint
	b := &pgx.Batch{}
	p.queueCheckpointViews(b, &out)
	if err := p.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("projection: checkpoints: %w", err)
	}
	return out, nil
}

// Quarantined lists quarantined events, the longest quarantined first.
func (p *Processor) Quarantined(ctx context.Context, opts ListOptions) ([]QuarantineEntry, error) {
	if err := p.checkFilter(opts); err != nil {
		return nil, err
	}
	f, err := p.genFilter(ctx, opts)
	if err != nil {
		return nil, err
	}
	rows, err := p.store.Quarantine.List(ctx, p.pool, f.keys(), opts.page())
	if err != nil {
		return nil, fmt.Errorf("projection: list quarantine: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QuarantineEntry, error) {
		var q QuarantineEntry
		err := row.Scan(&q.Projection, &q.Aggregate, &q.Version, &q.EventID, &q.Type, &q.Data, &q.Metadata, &q.Error, &q.Attempts,
			&q.QuarantinedAt, &q.LastAttemptAt)
		q.Projection, q.Generation = f.ref(q.Projection)
		return q, err
	})
	if err != nil {
		return nil, fmt.Errorf("projection: list quarantine: %w", err)
	}
	return out, nil
}

// Conflicts lists recorded conflicts in id order (the order they were first
// seen); page with ListOptions.AfterID.
func (p *Processor) Conflicts(ctx context.Context, opts ListOptions) ([]ConflictEntry, error) {
	if err := p.checkFilter(opts); err != nil {
		return nil, err
	}
	f, err := p.genFilter(ctx, opts)
	if err != nil {
		return nil, err
	}
	rows, err := p.store.Conflicts.List(ctx, p.pool, f.keys(), opts.page())
	if err != nil {
		return nil, fmt.Errorf("projection: list conflicts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ConflictEntry, error) {
		var c ConflictEntry
		var acked *time.Time
		err := row.Scan(&c.ID, &c.Projection, &c.Aggregate, &c.Version, &c.ExistingState, &c.ExistingEventID, &c.ExistingHash,
			&c.IncomingEventID, &c.IncomingHash, &c.Type, &c.Data, &c.Metadata, &c.Count, &c.FirstSeen, &c.LastSeen, &acked, &c.AckReason)
		if acked != nil {
			c.AcknowledgedAt = *acked
		}
		c.Projection, c.Generation = f.ref(c.Projection)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("projection: list conflicts: %w", err)
	}
	return out, nil
}

// Rejected lists rejected deliveries in id order (the order they were first
// seen); page with ListOptions.AfterID. ListOptions.Projection is ignored.
func (p *Processor) Rejected(ctx context.Context, opts ListOptions) ([]RejectedEntry, error) {
	rows, err := p.store.Rejected.List(ctx, p.pool, opts.page())
	if err != nil {
		return nil, fmt.Errorf("projection: list rejected: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RejectedEntry, error) {
		var r RejectedEntry
		var replayed, resolved *time.Time
		err := row.Scan(&r.ID, &r.Fingerprint, &r.Source, &r.EventID, &r.Aggregate, &r.Version, &r.Type, &r.ContentType, &r.Data, &r.Metadata,
			&r.Size, &r.Reason, &r.Error, &r.Count, &r.FirstSeen, &r.LastSeen, &replayed, &resolved, &r.Resolution, &r.ResolvedBy, &r.ResolveReason)
		if replayed != nil {
			r.ReplayedAt = *replayed
		}
		if resolved != nil {
			r.ResolvedAt = *resolved
		}
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("projection: list rejected: %w", err)
	}
	return out, nil
}

// OperatorLog lists the operator log in id order (oldest first); page with
// ListOptions.AfterID, filter with Projection, Aggregate and Action.
func (p *Processor) OperatorLog(ctx context.Context, opts ListOptions) ([]OperatorLogEntry, error) {
	rows, err := p.store.OpLog.List(ctx, p.pool, opts.Projection, opts.Action, opts.Generation, opts.page())
	if err != nil {
		return nil, fmt.Errorf("projection: list operator log: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OperatorLogEntry, error) {
		var e OperatorLogEntry
		err := row.Scan(&e.ID, &e.At, &e.Action, &e.Projection, &e.Generation, &e.Aggregate, &e.From, &e.To, &e.Reason, &e.By)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("projection: list operator log: %w", err)
	}
	return out, nil
}

// Version returns the last applied version of an aggregate in a projection:
// 0 if the projection has not seen the aggregate (or applied none of it).
func (p *Processor) Version(ctx context.Context, projection, aggregate string) (int64, error) {
	if _, ok := p.byName[projection]; !ok {
		return 0, fmt.Errorf("%w: %q", ErrUnknownProjection, projection)
	}
	var v int64
	err := p.pool.QueryRow(ctx, p.store.Versions.VersionOf(refOf(p.inlineView(ctx, projection)), p.store.Generations.LiveKey(1)), projection, aggregate).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("projection %s: version of %s: %w", projection, aggregate, err)
	}
	return v, nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Aggregates lists the gate state of the aggregates of one projection
// (ListOptions.Projection, required), in aggregate id order (byte order);
// page with ListOptions.After.
func (p *Processor) Aggregates(ctx context.Context, opts ListOptions) ([]AggregateState, error) {
	if err := p.needProjection(opts); err != nil {
		return nil, err
	}
	if opts.AllGenerations {
		return nil, errors.New("projection: list aggregates: one generation at a time")
	}
	it := refOf(p.inlineViewOf(ctx, opts.Projection, opts.Generation))
	f, err := p.genFilter(ctx, opts)
	if err != nil {
		return nil, err
	}
	key := f.include[0]
	name, gen := f.ref(key)
	rows, err := p.store.Versions.List(ctx, p.pool, key, it, opts.page())
	if err != nil {
		return nil, fmt.Errorf("projection: list aggregates: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AggregateState, error) {
		a := AggregateState{Projection: name, Generation: gen}
		err := row.Scan(&a.Aggregate, &a.Version, &a.Parked, &a.Quarantined)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("projection: list aggregates: %w", err)
	}
	return out, nil
}

// AppliedLog lists the applied log of one projection (ListOptions.Projection,
// required), ordered by aggregate id (byte order) and version; page with
// ListOptions.After. Versions an operator declared missing have no entry.
func (p *Processor) AppliedLog(ctx context.Context, opts ListOptions) ([]AppliedEntry, error) {
	if err := p.needProjection(opts); err != nil {
		return nil, err
	}
	if opts.AllGenerations {
		return nil, errors.New("projection: list applied log: one generation at a time")
	}
	it := p.inlineViewOf(ctx, opts.Projection, opts.Generation)
	f, err := p.genFilter(ctx, opts)
	if err != nil {
		return nil, err
	}
	name, gen := f.ref(f.include[0])
	opts.Projection = f.include[0] // the gate key
	if it != nil {
		out, err := p.inlineAppliedLog(ctx, it, opts)
		for i := range out {
			out[i].Projection, out[i].Generation = name, gen
		}
		return out, err
	}
	rows, err := p.store.Applied.ListLog(ctx, p.pool, opts.Projection, opts.page())
	if err != nil {
		return nil, fmt.Errorf("projection: list applied log: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (AppliedEntry, error) {
		a := AppliedEntry{Projection: name, Generation: gen}
		err := row.Scan(&a.Aggregate, &a.Version, &a.EventID, &a.Hash)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("projection: list applied log: %w", err)
	}
	return out, nil
}

// needProjection requires opts.Projection to name one of the processor's
// projections.
func (p *Processor) needProjection(opts ListOptions) error {
	if opts.Projection == "" {
		return fmt.Errorf("%w: a projection is required", ErrUnknownProjection)
	}
	return p.checkFilter(opts)
}
