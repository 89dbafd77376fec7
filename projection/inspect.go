package projection

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file holds the processor's read-only operator views: what the CLI's
// status, quarantine, conflicts and rejected commands and the HTTP status
// endpoint show. Parked events are listed by the processor's [Processor.Buffer]
// (buffer.Buffer.List and Waiting).

// DefaultListLimit is the number of rows a listing returns when
// ListOptions.Limit is not positive.
const DefaultListLimit = 100

// ListOptions filters and pages the operator listings. The zero value lists
// the first DefaultListLimit rows of every projection.
type ListOptions struct {
	// Projection, when set, restricts the listing to one projection, which
	// must be one of the processor's (else ErrUnknownProjection). Rejected
	// deliveries belong to no projection and ignore it.
	Projection string
	// Aggregate, when set, restricts the listing to one aggregate.
	Aggregate string
	// Limit caps the rows returned; default DefaultListLimit.
	Limit int
	// AfterID pages through listings whose rows have ids (conflicts and
	// rejected deliveries, ordered by id): only rows with a larger id are
	// returned. Pass the last id of the previous page. The quarantine has no
	// ids and ignores it.
	AfterID int64
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

// table returns the qualified name of one of inorder's tables.
func (p *Processor) table(name string) string { return pgx.Identifier{p.cfg.Schema, name}.Sanitize() }

// ProjectionStatus summarises the gate state of one projection.
type ProjectionStatus struct {
	// Name is the projection's name.
	Name string `json:"name"`
	// Aggregates counts the projection's version rows: every aggregate it
	// has seen, applied or not.
	Aggregates int64 `json:"aggregates"`
	// Events is the sum of the applied versions: the events applied (or
	// skipped by an operator) over all aggregates.
	Events int64 `json:"events"`
	// Parked counts parked events, ParkedAggregates the aggregates that have
	// some, and OldestParked is when the oldest of them was parked (zero if
	// none).
	Parked           int64     `json:"parked"`
	ParkedAggregates int64     `json:"parked_aggregates"`
	OldestParked     time.Time `json:"oldest_parked,omitzero"`
	// Quarantined counts quarantined events (at most one per aggregate).
	Quarantined int64 `json:"quarantined"`
	// Conflicts counts recorded conflicts: distinct conflicting events, not
	// their deliveries.
	Conflicts int64 `json:"conflicts"`
}

// Status returns one row per projection of the processor, in the order of
// Processor.Projections, including projections that have seen nothing yet.
func (p *Processor) Status(ctx context.Context) ([]ProjectionStatus, error) {
	sql := `SELECT n.name, coalesce(v.aggs, 0), coalesce(v.events, 0),
  coalesce(pk.events, 0), coalesce(pk.aggs, 0), pk.oldest,
  coalesce(q.n, 0), coalesce(c.n, 0)
FROM unnest($1::text[]) WITH ORDINALITY AS n(name, ord)
LEFT JOIN (SELECT projection, count(*) AS aggs, sum(version)::bigint AS events
  FROM ` + p.table("versions") + ` WHERE projection = ANY($1) GROUP BY projection) v ON v.projection = n.name
LEFT JOIN (SELECT projection, count(*) AS events, count(DISTINCT aggregate) AS aggs, min(parked_at) AS oldest
  FROM ` + p.table("parked") + ` WHERE projection = ANY($1) GROUP BY projection) pk ON pk.projection = n.name
LEFT JOIN (SELECT projection, count(*) AS n
  FROM ` + p.table("quarantine") + ` WHERE projection = ANY($1) GROUP BY projection) q ON q.projection = n.name
LEFT JOIN (SELECT projection, count(*) AS n
  FROM ` + p.table("conflicts") + ` WHERE projection = ANY($1) GROUP BY projection) c ON c.projection = n.name
ORDER BY n.ord`
	rows, err := p.pool.Query(ctx, sql, p.Projections())
	if err != nil {
		return nil, fmt.Errorf("projection: status: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ProjectionStatus, error) {
		var s ProjectionStatus
		var oldest *time.Time
		err := row.Scan(&s.Name, &s.Aggregates, &s.Events, &s.Parked, &s.ParkedAggregates, &oldest, &s.Quarantined, &s.Conflicts)
		if oldest != nil {
			s.OldestParked = *oldest
		}
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("projection: status: %w", err)
	}
	return out, nil
}

// QuarantineEntry is a quarantined event: the one event of an aggregate
// whose handler failed for good, with the last error.
type QuarantineEntry struct {
	Projection string `json:"projection"`
	Aggregate  string `json:"aggregate"`
	Version    int64  `json:"version"`
	// EventID is the event's stable id.
	EventID  string `json:"event_id"`
	Type     string `json:"type"`
	Data     []byte `json:"data"`
	Metadata []byte `json:"metadata,omitempty"`
	// Error is the handler's last error.
	Error string `json:"error"`
	// Attempts counts the handler calls that failed on the event, operator
	// retries included.
	Attempts      int       `json:"attempts"`
	QuarantinedAt time.Time `json:"quarantined_at"`
	LastAttemptAt time.Time `json:"last_attempt_at"`
}

// Quarantined lists quarantined events, the longest quarantined first.
func (p *Processor) Quarantined(ctx context.Context, opts ListOptions) ([]QuarantineEntry, error) {
	if err := p.checkFilter(opts); err != nil {
		return nil, err
	}
	rows, err := p.pool.Query(ctx, `SELECT projection, aggregate, version, event_id, type, data, metadata, error, attempts,
  quarantined_at, last_attempt_at
FROM `+p.table("quarantine")+`
WHERE ($1 = '' OR projection = $1) AND ($2 = '' OR aggregate = $2)
ORDER BY quarantined_at, projection, aggregate LIMIT $3`, opts.Projection, opts.Aggregate, opts.limit())
	if err != nil {
		return nil, fmt.Errorf("projection: list quarantine: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QuarantineEntry, error) {
		var q QuarantineEntry
		err := row.Scan(&q.Projection, &q.Aggregate, &q.Version, &q.EventID, &q.Type, &q.Data, &q.Metadata, &q.Error, &q.Attempts,
			&q.QuarantinedAt, &q.LastAttemptAt)
		return q, err
	})
	if err != nil {
		return nil, fmt.Errorf("projection: list quarantine: %w", err)
	}
	return out, nil
}

// ConflictEntry is a recorded conflict: deliveries of an (aggregate, version)
// whose id or payload differ from the event that holds that version.
type ConflictEntry struct {
	ID         int64  `json:"id"`
	Projection string `json:"projection"`
	Aggregate  string `json:"aggregate"`
	Version    int64  `json:"version"`
	// ExistingState says what holds the version: "applied", "parked",
	// "quarantined", "delivery" (an earlier delivery of the same batch) or
	// "skipped" (skipped or declared missing by an operator; the existing
	// id and hash are then empty).
	ExistingState   string `json:"existing_state"`
	ExistingEventID string `json:"existing_event_id"`
	ExistingHash    []byte `json:"existing_hash"`
	// IncomingEventID, IncomingHash, Type, Data and Metadata describe the
	// conflicting delivery.
	IncomingEventID string `json:"incoming_event_id"`
	IncomingHash    []byte `json:"incoming_hash"`
	Type            string `json:"type"`
	Data            []byte `json:"data"`
	Metadata        []byte `json:"metadata,omitempty"`
	// Count is how many times it was delivered.
	Count     int64     `json:"count"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
}

// Conflicts lists recorded conflicts in id order (the order they were first
// seen); page with ListOptions.AfterID.
func (p *Processor) Conflicts(ctx context.Context, opts ListOptions) ([]ConflictEntry, error) {
	if err := p.checkFilter(opts); err != nil {
		return nil, err
	}
	rows, err := p.pool.Query(ctx, `SELECT id, projection, aggregate, version, existing_state, existing_event_id, existing_hash,
  incoming_event_id, incoming_hash, type, data, metadata, count, first_seen, last_seen
FROM `+p.table("conflicts")+`
WHERE ($1 = '' OR projection = $1) AND ($2 = '' OR aggregate = $2) AND id > $4
ORDER BY id LIMIT $3`, opts.Projection, opts.Aggregate, opts.limit(), opts.AfterID)
	if err != nil {
		return nil, fmt.Errorf("projection: list conflicts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ConflictEntry, error) {
		var c ConflictEntry
		err := row.Scan(&c.ID, &c.Projection, &c.Aggregate, &c.Version, &c.ExistingState, &c.ExistingEventID, &c.ExistingHash,
			&c.IncomingEventID, &c.IncomingHash, &c.Type, &c.Data, &c.Metadata, &c.Count, &c.FirstSeen, &c.LastSeen)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("projection: list conflicts: %w", err)
	}
	return out, nil
}

// RejectedEntry is a delivery that failed validation. Its fields hold what
// was delivered, which may be empty or invalid.
type RejectedEntry struct {
	// ID identifies the entry for Processor.ReplayRejected.
	ID int64 `json:"id"`
	// Fingerprint identifies the delivery: the hash of its source, envelope
	// and error. Identical deliveries share one entry.
	Fingerprint []byte `json:"fingerprint"`
	Source      string `json:"source"`
	EventID     string `json:"event_id"`
	Aggregate   string `json:"aggregate"`
	Version     int64  `json:"version"`
	Type        string `json:"type"`
	Data        []byte `json:"data"`
	Metadata    []byte `json:"metadata,omitempty"`
	// Reason is the stable code of the validation error
	// (aggregate.Reason), Error its text.
	Reason string `json:"reason"`
	Error  string `json:"error"`
	// Count is how many times it was delivered.
	Count     int64     `json:"count"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// ReplayedAt is when an operator replayed it successfully (zero if
	// never).
	ReplayedAt time.Time `json:"replayed_at,omitzero"`
}

// Rejected lists rejected deliveries in id order (the order they were first
// seen); page with ListOptions.AfterID. ListOptions.Projection is ignored.
func (p *Processor) Rejected(ctx context.Context, opts ListOptions) ([]RejectedEntry, error) {
	rows, err := p.pool.Query(ctx, `SELECT id, fingerprint, source, event_id, aggregate, version, type, data, metadata,
  reason, error, count, first_seen, last_seen, replayed_at
FROM `+p.table("rejected")+`
WHERE ($1 = '' OR aggregate = $1) AND id > $3
ORDER BY id LIMIT $2`, opts.Aggregate, opts.limit(), opts.AfterID)
	if err != nil {
		return nil, fmt.Errorf("projection: list rejected: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (RejectedEntry, error) {
		var r RejectedEntry
		var replayed *time.Time
		err := row.Scan(&r.ID, &r.Fingerprint, &r.Source, &r.EventID, &r.Aggregate, &r.Version, &r.Type, &r.Data, &r.Metadata,
			&r.Reason, &r.Error, &r.Count, &r.FirstSeen, &r.LastSeen, &replayed)
		if replayed != nil {
			r.ReplayedAt = *replayed
		}
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("projection: list rejected: %w", err)
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
	err := p.pool.QueryRow(ctx, `SELECT version FROM `+p.table("versions")+` WHERE projection = $1 AND aggregate = $2`,
		projection, aggregate).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("projection %s: version of %s: %w", projection, aggregate, err)
	}
	return v, nil
}
