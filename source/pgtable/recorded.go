package pgtable

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/inorder/inorder/projection"
)

// This file holds the mapping the workers record in the processor's schema
// when they start (projection.Processor.RecordSource), so that a repair or
// a rebuild run from elsewhere reads the same table, with the same columns
// and partitions.

// Kind is the kind of source this package records (projection.SourceInfo).
const Kind = "postgres"

// recorded is the JSON form of what a source records.
type recorded struct {
	Table      Table `json:"table"`
	Partitions int   `json:"partitions"`
}

// record writes the source's mapping to its processor's schema.
func (s *Source) record(ctx context.Context) error {
	t := s.cfg.Table
	t.Schema = s.cfg.schema // resolved: the default is the processor's schema
	m, err := json.Marshal(recorded{Table: t, Partitions: s.cfg.Partitions})
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	return s.cfg.Processor.RecordSource(ctx, projection.SourceInfo{Name: s.cfg.Name, Kind: Kind, Mapping: m,
		Host: fmt.Sprintf("%s pid %d", host, os.Getpid())})
}

func (r recorded) String() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// readWith returns the table and partitions a repair or a rebuild reads
// with: the flags' when given (noting where the workers differ), else the
// one the workers of the schema recorded — of the source named name, if set.
func readWith(ctx context.Context, proc *projection.Processor, name string, given bool, mine recorded, note func(string)) (recorded, error) {
	if proc == nil {
		return mine, nil
	}
	if note == nil {
		note = func(string) {}
	}
	infos, err := proc.Sources(ctx, Kind)
	if err != nil {
		return mine, fmt.Errorf("pgtable: recorded sources: %w", err)
	}
	distinct := map[string]recorded{}
	names := map[string]string{}
	for _, in := range infos {
		if name != "" && in.Name != name {
			continue
		}
		var r recorded
		if err := json.Unmarshal(in.Mapping, &r); err != nil {
			return mine, fmt.Errorf("pgtable: recorded source %s: %w", in.Name, err)
		}
		distinct[r.String()], names[r.String()] = r, in.Name
	}
	switch {
	case given:
		for _, d := range slices.Sorted(maps.Keys(distinct)) {
			if d != mine.String() {
				note(fmt.Sprintf("note: the workers of source %s read %s; this command reads %s, as its flags say", names[d], d, mine))
			}
		}
		return mine, nil
	case len(distinct) == 0:
		note(fmt.Sprintf("note: no worker recorded its table in this schema; reading %s", mine))
		return mine, nil
	case len(distinct) == 1:
		for d, r := range distinct {
			note(fmt.Sprintf("reading the table as the workers of source %s do: %s", names[d], d))
			return r, nil
		}
	}
	var ds []string
	for _, d := range slices.Sorted(maps.Keys(distinct)) {
		ds = append(ds, names[d]+": "+d)
	}
	return mine, fmt.Errorf("pgtable: the workers of this schema's sources read different tables (%s): name one with --name, or give --pg-table, --pg-columns and --pg-partitions",
		strings.Join(ds, "; "))
}
