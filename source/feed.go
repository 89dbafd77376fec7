package source

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Feed is a source running in a worker process — an EventStoreDB
// subscription, a PostgreSQL events-table reader, a broker consumer — as the
// programs that run any kind of source see it: package cli's run command
// (through a Driver) and the conformance suite of package
// source/sourcetest.
type Feed interface {
	// Run consumes until ctx is cancelled, then drains — stops receiving,
	// commits and acknowledges the batches in flight, saves its position —
	// and returns nil. It returns early with an error only when the source
	// cannot go on (the server refused it for good). Run is called once.
	Run(ctx context.Context) error

	// Abort cuts a drain short (the second signal): the batches in flight
	// roll back and are delivered again later. Safe to call at any time,
	// more than once.
	Abort()

	// Lag returns the last lag measured (Known false before one).
	Lag() Lag

	// MeasureLag measures the lag now, with or without Run.
	MeasureLag(ctx context.Context) (Lag, error)

	// RegisterMetrics registers the source's collectors. Every source
	// exports at least inorder_source_lag_events and
	// inorder_source_lag_seconds, labelled source=<its name>, once the lag
	// is measured (see NewCollector).
	RegisterMetrics(reg prometheus.Registerer) error
}

// ErrAborted is wrapped by the error of a Feed's Run whose drain was cut
// short (Abort, or a drain timeout): the batches in flight rolled back and
// are delivered again on the next run.
var ErrAborted = errors.New("source: drain aborted")

// Lag is how far a source is behind the head of what it reads.
type Lag struct {
	// Source is the source's name.
	Source string `json:"source"`
	// Known is false until a measurement succeeded; the figures are zero
	// then.
	Known bool `json:"known"`
	// MeasuredAt is when it was measured.
	MeasuredAt time.Time `json:"measured_at,omitzero"`
	// Events counts the events not committed yet: in flight, plus not yet
	// received.
	Events int64 `json:"events"`
	// Behind is the age of the oldest of them, by the time the source
	// recorded it, and 0 when Events is 0 (BehindSeconds in JSON).
	Behind        time.Duration `json:"-"`
	BehindSeconds float64       `json:"behind_seconds"`
	// Err is the error of the last measurement, if it failed; the figures
	// are those of the one before.
	Err string `json:"error,omitempty"`
}
