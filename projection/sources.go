package projection

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the sources table: how each source's workers map their
// stream to aggregates, recorded when they start, so that what reads the
// stream from elsewhere — a repair of parked events, a rebuild, run from an
// operator's shell — reads it the way the workers do.

// SourceInfo is what a source's workers record about themselves
// (Processor.RecordSource).
type SourceInfo struct {
	// Name is the source's name: its checkpoint's, its metrics', the one
	// recorded with its rejected deliveries.
	Name string `json:"name"`
	// Kind names the kind of source: "esdb", "postgres", "nats", "kafka"…
	Kind string `json:"kind"`
	// Mapping is the source's own description, as JSON, of how it maps
	// what it reads to events: what a repair or a rebuild must use to read
	// the same aggregates (for EventStoreDB, the stream prefix, the
	// version field and the type filter).
	Mapping json.RawMessage `json:"mapping"`
	// Host says where the worker that recorded it runs (host and process
	// id).
	Host string `json:"host,omitempty"`
	// StartedAt is when that worker started.
	StartedAt time.Time `json:"started_at"`
}

// RecordSource records s, replacing what a worker of the same source
// recorded before: the last worker to start says how the source maps its
// stream. Sources call it when they start.
func (p *Processor) RecordSource(ctx context.Context, s SourceInfo) error {
	if s.Name == "" || s.Kind == "" {
		return fmt.Errorf("projection: record source: a name and a kind are required")
	}
	mapping := s.Mapping
	if len(mapping) == 0 {
		mapping = json.RawMessage(`{}`)
	}
	err := p.store.Sources.Record(ctx, p.pool, store.Source{Name: s.Name, Kind: s.Kind, Mapping: string(mapping), Host: s.Host})
	if err != nil {
		return fmt.Errorf("projection: record source %s: %w", s.Name, err)
	}
	return nil
}

// Sources lists the sources recorded in the schema (RecordSource), by name;
// kind, when set, keeps only the sources of that kind.
func (p *Processor) Sources(ctx context.Context, kind string) ([]SourceInfo, error) {
	rows, err := p.store.Sources.List(ctx, p.pool, kind)
	if err != nil {
		return nil, fmt.Errorf("projection: list sources: %w", err)
	}
	out := make([]SourceInfo, len(rows))
	for i, r := range rows {
		out[i] = SourceInfo{Name: r.Name, Kind: r.Kind, Mapping: json.RawMessage(r.Mapping), Host: r.Host, StartedAt: r.StartedAt}
	}
	return out, nil
}
