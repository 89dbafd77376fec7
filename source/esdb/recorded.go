package esdb

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

// This file holds the mapping a source's workers record in the schema when
// they start (projection.Processor.RecordSource), and the rule that what
// reads the streams from elsewhere — gap repair, a rebuild — reads them
// with the mapping the workers use, not with one of its own.

// Kind is the kind of source this package records (projection.SourceInfo).
const Kind = "esdb"

// Recorded is how the workers of one EventStoreDB source map streams, as
// they recorded it when they started (Run does).
type Recorded struct {
	// Name is the source's name (Config.Name).
	Name string
	// Mapping and TypeRegex are the workers' Config.Mapping and TypeRegex.
	Mapping   Mapping
	TypeRegex string
	// Info is the row as recorded: where and when the worker started.
	Info projection.SourceInfo
}

// recordedMapping is the JSON form of what a source records.
type recordedMapping struct {
	StreamPrefix string `json:"stream_prefix"`
	VersionField string `json:"version_field,omitempty"`
	TypeRegex    string `json:"type_regex,omitempty"`
}

// record writes the source's mapping to its processor's schema.
func (s *Source) record(ctx context.Context) error {
	m, err := json.Marshal(recordedMapping{StreamPrefix: s.cfg.Mapping.StreamPrefix, VersionField: s.cfg.Mapping.VersionField,
		TypeRegex: s.cfg.TypeRegex})
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	return s.cfg.Processor.RecordSource(ctx, projection.SourceInfo{Name: s.cfg.Name, Kind: Kind, Mapping: m,
		Host: fmt.Sprintf("%s pid %d", host, os.Getpid())})
}

// RecordedSources returns how the EventStoreDB sources of proc's schema map
// streams, as their workers recorded it, by name: what a repair or a
// rebuild run from elsewhere must read the streams with (the CLI's 'parked
// repair' and 'rebuild' use it unless told otherwise).
func RecordedSources(ctx context.Context, proc *projection.Processor) ([]Recorded, error) {
	infos, err := proc.Sources(ctx, Kind)
	if err != nil {
		return nil, fmt.Errorf("esdb: recorded sources: %w", err)
	}
	out := make([]Recorded, 0, len(infos))
	for _, in := range infos {
		var m recordedMapping
		if err := json.Unmarshal(in.Mapping, &m); err != nil {
			return nil, fmt.Errorf("esdb: recorded source %s: %w", in.Name, err)
		}
		out = append(out, Recorded{Name: in.Name, Mapping: Mapping{StreamPrefix: m.StreamPrefix, VersionField: m.VersionField},
			TypeRegex: m.TypeRegex, Info: in})
	}
	return out, nil
}

// mappingFlags are the driver's flags of the mapping a worker records.
var mappingFlags = []string{"stream-prefix", "version-field", "type-regex"}

// readWith returns the mapping and type filter a repair or a rebuild reads
// the streams with: the flags' when given (with a note if they differ from
// the workers'), else the one the workers of the schema recorded — of the
// source named name, if set — (see source.Repairer). proc nil: the flags'.
func readWith(ctx context.Context, proc *projection.Processor, name string, given bool, m Mapping, typeRegex string,
	note func(string)) (Mapping, string, error) {
	if proc == nil {
		return m, typeRegex, nil
	}
	if note == nil {
		note = func(string) {}
	}
	recorded, err := RecordedSources(ctx, proc)
	if err != nil {
		return m, typeRegex, err
	}
	if name != "" {
		var named []Recorded
		for _, r := range recorded {
			if r.Name == name {
				named = append(named, r)
			}
		}
		if len(named) == 0 && !given {
			return m, typeRegex, fmt.Errorf("esdb: no source named %q recorded its mapping in this schema (recorded: %s): "+
				"give the mapping flags (--stream-prefix, --version-field, --type-regex)", name, recordedNames(recorded))
		}
		recorded = named
	}
	distinct := map[string]Recorded{}
	for _, r := range recorded {
		distinct[describeMapping(r.Mapping, r.TypeRegex)] = r
	}
	switch {
	case given:
		mine := describeMapping(m, typeRegex)
		for _, d := range slices.Sorted(maps.Keys(distinct)) {
			if d != mine {
				note(fmt.Sprintf("note: the workers of source %s read the streams with %s; this command reads them with %s, as its flags say",
					distinct[d].Name, d, mine))
			}
		}
		return m, typeRegex, nil
	case len(distinct) == 0:
		note(fmt.Sprintf("note: no worker recorded its mapping in this schema; reading the streams with %s "+
			"(give --stream-prefix, --version-field, --type-regex as the workers have them)", describeMapping(m, typeRegex)))
		return m, typeRegex, nil
	case len(distinct) == 1:
		for d, r := range distinct {
			note(fmt.Sprintf("reading the streams as the workers of source %s do: %s", r.Name, d))
			return r.Mapping, r.TypeRegex, nil
		}
	}
	var ds []string
	for _, d := range slices.Sorted(maps.Keys(distinct)) {
		ds = append(ds, distinct[d].Name+": "+d)
	}
	return m, typeRegex, fmt.Errorf("esdb: the workers of this schema's sources read the streams differently (%s): "+
		"name one with --name, or give the mapping flags", strings.Join(ds, "; "))
}

// describeMapping renders a mapping as the flags that give it.
func describeMapping(m Mapping, typeRegex string) string {
	s := fmt.Sprintf("--stream-prefix %q", m.StreamPrefix)
	if m.VersionField != "" {
		s += fmt.Sprintf(" --version-field %q", m.VersionField)
	}
	if typeRegex != "" {
		s += fmt.Sprintf(" --type-regex %q", typeRegex)
	}
	return s
}

func recordedNames(rs []Recorded) string {
	if len(rs) == 0 {
		return "none"
	}
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.Name
	}
	return strings.Join(names, ", ")
}
