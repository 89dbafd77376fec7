package kafka

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/inorder/inorder/projection"
)

// This file holds the mapping a source's workers record in the schema when
// they start (projection.Processor.RecordSource), and the rule of
// source.Repairer: a rebuild reads the topics with the mapping the workers
// use, unless its flags give one.

// Kind is the kind of source this package records (projection.SourceInfo).
const Kind = "kafka"

// recorded is the JSON form of what a source records: its Mapping, with
// the defaults filled in.
type recorded struct {
	Aggregate string `json:"aggregate"`
	Version   string `json:"version"`
	Type      string `json:"type"`
	ID        string `json:"id"`
	Metadata  string `json:"metadata"`
}

func (m *mapping) recorded() recorded {
	return recorded{Aggregate: m.Aggregate.Text, Version: m.Version.Text, Type: m.Type.Text, ID: m.ID.Text, Metadata: m.Metadata.Text}
}

// record writes the source's mapping to its processor's schema.
func (s *Source) record(ctx context.Context) error {
	m, err := json.Marshal(s.cfg.mapping.recorded())
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	return s.cfg.Processor.RecordSource(ctx, projection.SourceInfo{Name: s.cfg.Name, Kind: Kind, Mapping: m,
		Host: fmt.Sprintf("%s pid %d", host, os.Getpid())})
}

// readWith returns the mapping a rebuild reads the topics with: the flags'
// when given, else the one the workers of source name recorded (or the one
// Kafka source recorded, when name is empty); note says which.
func readWith(ctx context.Context, proc *projection.Processor, name string, given bool, m Mapping, note func(string)) (Mapping, error) {
	if proc == nil || given {
		return m, nil
	}
	if note == nil {
		note = func(string) {}
	}
	infos, err := proc.Sources(ctx, Kind)
	if err != nil {
		return m, fmt.Errorf("kafka: recorded sources: %w", err)
	}
	var found []projection.SourceInfo
	for _, in := range infos {
		if name == "" || in.Name == name {
			found = append(found, in)
		}
	}
	switch len(found) {
	case 0:
		note("note: no Kafka worker recorded its mapping in this schema; reading the topics with the flags' mapping")
		return m, nil
	case 1:
		var r recorded
		if err := json.Unmarshal(found[0].Mapping, &r); err != nil {
			return m, fmt.Errorf("kafka: recorded source %s: %w", found[0].Name, err)
		}
		note(fmt.Sprintf("reading the topics as the workers of source %s do: --aggregate-from %q --version-from %q --type-from %q --id-from %q",
			found[0].Name, r.Aggregate, r.Version, r.Type, r.ID))
		return Mapping(r), nil
	}
	return m, fmt.Errorf("kafka: several Kafka sources recorded their mappings in this schema: name one with --name, or give the mapping flags")
}
