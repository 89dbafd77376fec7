package sourceutil

import (
	"cmp"
	"log/slog"
	"time"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// Dispatch is the settings of the dispatcher that the Config of the esdb,
// kafka and nats sources has, under the same names.
type Dispatch struct {
	Workers, BatchSize int
	MaxWait            time.Duration
	ReadAhead          int
	Logger             *slog.Logger
}

// Defaults returns d with its zero settings defaulted: source.DefaultWorkers,
// DefaultBatchSize, DefaultMaxWait, DefaultWindow for ReadAhead, and a
// Logger that discards.
func (d Dispatch) Defaults() Dispatch {
	d.Workers = cmp.Or(d.Workers, source.DefaultWorkers)
	d.BatchSize = cmp.Or(d.BatchSize, source.DefaultBatchSize)
	d.MaxWait = cmp.Or(d.MaxWait, source.DefaultMaxWait)
	d.ReadAhead = cmp.Or(d.ReadAhead, source.DefaultWindow(d.Workers, d.BatchSize))
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	return d
}

// Config returns the dispatcher's Config of the source named name, over p:
// ReadAhead is its window (MaxInFlight).
func (d Dispatch) Config(p *projection.Processor, name string) source.Config {
	return source.Config{
		Processor:   p,
		Source:      name,
		Workers:     d.Workers,
		BatchSize:   d.BatchSize,
		MaxWait:     d.MaxWait,
		MaxInFlight: d.ReadAhead,
		Logger:      d.Logger,
	}
}
