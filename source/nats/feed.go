package nats

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/inorder/inorder/source/internal/sourceutil"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// Kind is the kind of source this package records (projection.SourceInfo).
const Kind = "nats"

// Feed returns the source as a source.Feed, for the worker binary and the
// conformance suite: its Lag is the summary of ConsumerLag.
func (s *Source) Feed() source.Feed { return sourceutil.Feed[Lag](s) }

// Summary returns the figures of l every source reports (source.Lag).
func (l Lag) Summary() source.Lag {
	return source.Lag{Source: l.Source, Known: l.Known, MeasuredAt: l.MeasuredAt, Events: l.Events,
		Behind: l.Behind, BehindSeconds: l.Behind.Seconds(), Err: l.Err}
}

// recorded is the JSON form of the mapping a source's workers record in the
// schema when they start: what a rebuild run from elsewhere reads the
// stream with.
type recorded struct {
	Stream   string   `json:"stream"`
	Subjects []string `json:"subjects,omitempty"`
	Mapping  Mapping  `json:"mapping"`
}

func (s *Source) record(ctx context.Context) error {
	m, err := json.Marshal(recorded{Stream: s.cfg.Stream, Subjects: s.cfg.Subjects, Mapping: s.cfg.Mapping})
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	return s.cfg.Processor.RecordSource(ctx, projection.SourceInfo{Name: s.cfg.Name, Kind: Kind, Mapping: m,
		Host: fmt.Sprintf("%s pid %d", host, os.Getpid())})
}
