package sourceutil

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inorder/inorder/source"
)

// Summarizer is a source's own lag type: it sums up to the figures every
// source reports.
type Summarizer interface{ Summary() source.Lag }

// Lagging is a source with a lag type of its own, L.
type Lagging[L Summarizer] interface {
	Run(ctx context.Context) error
	Abort()
	RegisterMetrics(reg prometheus.Registerer) error
	Lag() L
	MeasureLag(ctx context.Context) (L, error)
}

// Feed returns s as a source.Feed: its Lag and MeasureLag are s's, summed
// up.
func Feed[L Summarizer](s Lagging[L]) source.Feed { return feed[L]{s} }

type feed[L Summarizer] struct{ s Lagging[L] }

func (f feed[L]) Run(ctx context.Context) error                   { return f.s.Run(ctx) }
func (f feed[L]) Abort()                                          { f.s.Abort() }
func (f feed[L]) RegisterMetrics(reg prometheus.Registerer) error { return f.s.RegisterMetrics(reg) }
func (f feed[L]) Lag() source.Lag                                 { return f.s.Lag().Summary() }

func (f feed[L]) MeasureLag(ctx context.Context) (source.Lag, error) {
	l, err := f.s.MeasureLag(ctx)
	return l.Summary(), err
}

// Open is a driver's Open: it builds the source of cfg (the driver's
// config, or its error) with newSource and returns it as a Feed.
func Open[C any, S interface{ Feed() source.Feed }](cfg C, err error, newSource func(C) (S, error)) (source.Feed, error) {
	if err != nil {
		return nil, err
	}
	s, err := newSource(cfg)
	if err != nil {
		return nil, err
	}
	return s.Feed(), nil
}
