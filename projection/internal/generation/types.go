package generation

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/inorder/inorder/aggregate"
)

// This file holds what a rebuild takes and reports: its options, its
// progress reports, its result and its verification error — the internal
// forms of package projection's BuildOptions, BuildProgress, BuildResult
// and VerificationError, which projection converts — and the generations'
// states and phases.

// States of a generation (the generations table's state column; package
// projection's State… constants, which document them, have the same
// values).
const (
	StateBuilding = "building"
	StateCatchUp  = "catchup"
	StateLive     = "live"
	StatePrevious = "previous"
	StateFailed   = "failed"
	StateRetired  = "retired"
	StateDropped  = "dropped"
)

// Phases of a side-by-side rebuild (package projection's Phase…
// constants, which document them, have the same values).
const (
	PhaseReplay          = "replay"
	PhaseFinalize        = "finalize"
	PhaseCatchUp         = "catch-up"
	PhaseVerify          = "verify"
	PhaseSwitch          = "switch"
	PhaseReady           = "ready"
	PhaseSwitchRequested = "switch-requested"
)

// Stream is a source's history as a side-by-side rebuild reads it
// (projection.Stream).
type Stream interface {
	Read(ctx context.Context, from []byte, fn func(ctx context.Context, b StreamBatch) error) error
}

// StreamBatch is a run of consecutive records of a Stream
// (projection.StreamBatch).
type StreamBatch struct {
	Events   []aggregate.Event
	Rejects  []Reject
	Read     int64
	Position []byte
	Time     time.Time
}

// Options configures a side-by-side Build (projection.BuildOptions, its
// defaults applied).
type Options struct {
	Stream Stream
	// Fraction is the Stream's progress (projection.StreamProgress), nil
	// when it does not tell.
	Fraction      func() float64
	BatchSize     int
	MaxAggregates int
	CatchUpEvents int64
	Retention     time.Duration
	ExpectChanges bool
	VerifyTimeout time.Duration
	Unlogged      bool
	Wait          bool
	By            string
	Hold          bool
	Progress      func(Progress)
}

// Progress reports a rebuild's progress (projection.BuildProgress).
type Progress struct {
	Projection  string
	Generation  int
	Phase       string
	Events      int64
	PhaseEvents int64
	Elapsed     time.Duration
	Rate        float64
	Fraction    float64
	ETA         time.Duration
	Position    []byte
	Note        string
}

// Result reports a rebuild (projection.BuildResult).
type Result struct {
	Projection  string
	Generation  int
	Previous    int
	CodeVersion int
	Events      int64
	Resumed     bool
	AlreadyLive bool
	Elapsed     time.Duration
}

// VerificationError reports a new generation that did not pass its checks
// (projection.VerificationError, which package projection returns in its
// place).
type VerificationError struct {
	Projection string
	Generation int
	Problems   []string
	// Also is the failure to record the generation failed, if any: the
	// error reported is then errors.Join(the verification error, Also).
	Also error
}

// Error implements error.
func (e *VerificationError) Error() string {
	return fmt.Sprintf("projection %s: generation %d failed verification: %s", e.Projection, e.Generation, strings.Join(e.Problems, "; "))
}
