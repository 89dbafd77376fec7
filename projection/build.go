package projection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection/internal/generation"
)

// This file holds the rebuild's public API — Build, side by side or in
// place, its options, progress, result and errors — over package
// internal/generation, which holds the rebuild itself: Build converts and
// delegates. gengate.go has the gate as the rebuild reaches it; switch.go
// the operator actions on generations (Switch, Rollback, DropGeneration).

// Phases of a side-by-side rebuild (Generation.Phase, BuildProgress.Phase).
const (
	// PhaseReplay: the stream is replayed from its start into the new
	// generation, in bulk.
	PhaseReplay = "replay"
	// PhaseFinalize: the replay's gate state is written (version rows,
	// applied log) and the generation's tables made durable.
	PhaseFinalize = "finalize"
	// PhaseCatchUp: the rebuild reads the stream from where the replay
	// stopped to its end, through the gate, while the processors of the
	// generation's code version feed it too.
	PhaseCatchUp = "catch-up"
	// PhaseVerify: the generation's checks run (see Processor.Build).
	PhaseVerify = "verify"
	// PhaseSwitch: the generation is switched in.
	PhaseSwitch = "switch"
)

// Defaults of BuildOptions.
const (
	// DefaultBuildBatch is BuildOptions.BatchSize's default.
	DefaultBuildBatch = 5000
	// DefaultBuildAggregates is BuildOptions.MaxAggregates's default:
	// about 100 MB of memory.
	DefaultBuildAggregates = 1 << 20
	// DefaultCatchUpEvents is BuildOptions.CatchUpEvents's default.
	DefaultCatchUpEvents = 10_000
	// DefaultRetention is BuildOptions.Retention's default.
	DefaultRetention = 24 * time.Hour
	// DefaultVerifyTimeout is BuildOptions.VerifyTimeout's default.
	DefaultVerifyTimeout = time.Minute
)

// Errors of side-by-side rebuilds (Build without BuildOptions.InPlace;
// ErrNotResettable is the in-place mode's).
var (
	// ErrBuildInProgress reports a Build of a projection that another
	// process (or goroutine) is building, when BuildOptions.Wait is false.
	ErrBuildInProgress = errors.New("a rebuild of the projection is in progress")
	// ErrNoPrevious reports a rollback without a previous generation that
	// is still fed.
	ErrNoPrevious = errors.New("no previous generation to roll back to")
	// ErrLiveGeneration reports an attempt to drop the live generation.
	ErrLiveGeneration = errors.New("the generation is live")
	// ErrNoGeneration reports a generation number that does not exist.
	ErrNoGeneration = errors.New("no such generation")
	// ErrNoSchema reports a projection that created no table in its new
	// generation's schema: its SQL names its schema instead of following the
	// search_path, so it cannot be rebuilt side by side (rebuild it in
	// place).
	ErrNoSchema = errors.New("the projection's tables do not follow the search_path")
)

// Phases of a held rebuild (Generation.Phase).
const (
	// PhaseReady: the generation is caught up and waits for an operator's
	// Switch (BuildOptions.Hold); it stays in catch-up, fed.
	PhaseReady = "ready"
	// PhaseSwitchRequested: an operator asked for the switch; the rebuild
	// verifies and switches it in.
	PhaseSwitchRequested = "switch-requested"
)

// ErrNotReady reports a Switch of a generation that is not waiting for
// one: not held, not caught up yet, or already switched.
var ErrNotReady = errors.New("the generation is not ready to switch")

// VerificationError reports a new generation that did not pass its checks:
// it was not switched in and is kept, in state StateFailed, for inspection.
type VerificationError struct {
	Projection string
	Generation int
	// Problems says what failed, one entry per check.
	Problems []string
}

// Error implements error.
func (e *VerificationError) Error() string {
	return fmt.Sprintf("projection %s: generation %d failed verification: %s", e.Projection, e.Generation, strings.Join(e.Problems, "; "))
}

// BuildOptions configures Processor.Build. Stream is required side by
// side, Replay in place (InPlace).
//
// In place, Build uses Replay, Total, By and Progress only.
type BuildOptions struct {
	// InPlace rebuilds the live generation in place instead of building a
	// new one side by side: its read model and gate state are emptied and
	// the stream replayed into them through the gate, while the
	// projection's live workers pause (see Processor.Build, In place).
	InPlace bool

	// Stream is the source's history, read side by side. Required unless
	// InPlace.
	Stream Stream

	// Replay is the source's history, replayed in place. Required with
	// InPlace.
	Replay Replay

	// Total, if positive, is the number of events Replay will emit, in
	// place: it makes BuildProgress.Fraction and ETA available there.
	Total int64

	// BatchSize is how many events the replay applies per transaction (and
	// per BatchHandler call): at least that many, the stream's batches
	// being kept whole. Default DefaultBuildBatch (5000).
	BatchSize int

	// MaxAggregates bounds the aggregates whose version the replay keeps
	// in memory; beyond, it forgets them and looks them up in its journal
	// (an index on it is created then). Default DefaultBuildAggregates.
	MaxAggregates int

	// CatchUpEvents is the replay's and the catch-up's threshold: each
	// reads the stream to its end again while the last pass read more
	// records than this. Default DefaultCatchUpEvents (10,000).
	CatchUpEvents int64

	// Retention is how long the generation that was live stays fed after
	// the switch, for an exact rollback; it is then retired (no longer
	// fed) and dropped by the next rebuild. Default DefaultRetention (24 h);
	// negative retires it at once.
	Retention time.Duration

	// ExpectChanges skips the comparison with the live generation's
	// content that a rebuild with the same code version makes: for a
	// repair of a read model known to be damaged.
	ExpectChanges bool

	// VerifyTimeout bounds how long verification waits for the new
	// generation and the live one to be in step (no aggregate of the new
	// one behind; with the same code version, the same aggregate versions
	// and nothing parked beyond) before it gives up: under load, the live
	// generation's workers' lag at the replay's end. Default
	// DefaultVerifyTimeout (1 min).
	VerifyTimeout time.Duration

	// Unlogged makes the new generation's tables unlogged during the
	// replay (no write-ahead log; lost if the database server crashes, in
	// which case the replay starts again) and logged again when the
	// generation goes into catch-up, which rewrites them. By default they
	// stay logged: the replay commits without waiting for the disk either
	// way, and on the ledger the rewrite costs more than the log saves
	// (docs/benchmarks.md).
	Unlogged bool

	// Wait makes a Build that finds the projection being built by another
	// process wait for it instead of failing with ErrBuildInProgress; if
	// that one completes, Build reports it (BuildResult.AlreadyLive).
	Wait bool

	// By names who rebuilds, for the operator log (see ActionOptions.By).
	By string

	// Hold stops the rebuild before the switch: once caught up, the
	// generation waits in PhaseReady (still in catch-up, kept current by
	// the rebuild and the workers) until an operator calls
	// Processor.Switch; then it is verified and switched in as usual.
	Hold bool

	// Progress, if set, is called after every replay transaction and
	// catch-up batch, at every phase change, and with notes (waiting for
	// another build, verification retries), from the goroutine that called
	// Build. In place, it is called after each batch Replay emits (one
	// call at a time), from the goroutine that called emit.
	Progress func(BuildProgress)
}

// BuildProgress reports a rebuild's progress. In place, Generation is the
// live generation, Phase PhaseReplay throughout, Events and PhaseEvents
// count the events emitted (duplicates included) and Elapsed runs from
// the replay's start; Position and Note are not set.
type BuildProgress struct {
	Projection string
	Generation int
	// Phase is the current phase (PhaseReplay, …).
	Phase string
	// Events counts the events the rebuild read, all phases.
	Events int64
	// PhaseEvents counts those of the current phase; Elapsed is the time
	// since it began and Rate PhaseEvents per second of it.
	PhaseEvents int64
	Elapsed     time.Duration
	Rate        float64
	// Fraction is how far the phase's current read of the stream is, from
	// 0 to 1, when the Stream tells (StreamProgress) — in place, Events
	// of BuildOptions.Total when it is set —; else -1. ETA estimates the
	// time left to the end of that read from it.
	Fraction float64
	ETA      time.Duration
	// Position is the last position applied.
	Position Position
	// Note, when set, is a message for operators.
	Note string
}

// BuildResult reports a rebuild.
type BuildResult struct {
	Projection string
	// Generation is the generation built; Previous the one that was live
	// (side by side; in place, Generation is the live generation, rebuilt,
	// and Previous is 0).
	Generation  int
	Previous    int
	CodeVersion int
	// Events counts the events the rebuild read (this run only); in
	// place, those Replay emitted.
	Events int64
	// Resumed is true when the run continued a rebuild that had stopped.
	Resumed bool
	// AlreadyLive is true when another process built the generation while
	// this Build waited for it (BuildOptions.Wait).
	AlreadyLive bool
	// Elapsed is the run's duration.
	Elapsed time.Duration
}

// Build rebuilds a projection: side by side, or in place with
// BuildOptions.InPlace (see In place below).
//
// Side by side, it builds a new generation —
// its own read-model tables in a schema of its own, its own gate state —
// from the whole stream while the live generation keeps serving and being
// fed, checks it, and switches it in with one transaction. See the package
// documentation, Generations, for the model.
//
// The phases:
//
//  1. Replay (PhaseReplay): the stream from its start into the new
//     generation, in order, by one writer, without the gate's version rows
//     — each aggregate's last version is kept in memory (bounded by
//     BuildOptions.MaxAggregates) and its applied log appended to an
//     unlogged journal (an inline projection's rows hold it: no journal) —
//     with BatchHandlers called on large batches (and the tables unlogged
//     with BuildOptions.Unlogged). Each transaction stores the replay's position: a
//     Build stopped any way (SIGKILL included) resumes there. Events that
//     do not continue their aggregate (duplicates, gaps, out-of-order
//     versions) and handler failures go through the gate instead, where
//     they park, count as duplicates, conflict or are quarantined as in a
//     live batch. The replay reads the stream to its end again while a
//     pass reads more than BuildOptions.CatchUpEvents records.
//  2. Finalize (PhaseFinalize): in one transaction, the version rows and
//     applied log are written from the journal, the tables made logged, and
//     the generation enters catch-up: from then on every processor whose
//     projection has the generation's code version feeds it, with the live
//     one, in the same transactions.
//  3. Catch-up (PhaseCatchUp): the rebuild reads the stream from where the
//     replay stopped to its end, through the gate: the events processors
//     applied to the live generation only, before they fed the new one,
//     all come before that end (see the package documentation). Its
//     batches feed what a worker of its code version feeds — the new
//     generation and, when the code did not change, the live one — so
//     from the replay's end on both are fed by the same transactions.
//  4. Verify (PhaseVerify) and switch (PhaseSwitch), in one REPEATABLE READ
//     transaction: the projection's Description.Verify, nothing quarantined
//     or parked beyond what the live generation has, and, when the code
//     version did not change and BuildOptions.ExpectChanges is false, the
//     same aggregate versions and the same content as the live generation
//     (row count and checksum per table); then the new generation is live
//     and the old one previous (still fed, for Rollback, until
//     BuildOptions.Retention ends). While the two are not in step yet, it
//     retries, up to BuildOptions.VerifyTimeout: after reading the stream
//     again while the new generation is behind the live one; after a wait
//     while the live one lags (its workers have yet to deliver events up to
//     the replay's end, which the new one has). A stream that never goes
//     quiet delays the switch by the workers' lag, not indefinitely, and
//     writers never pause for it.
//     A failed check leaves the old generation live and the new one in
//     StateFailed with a *VerificationError.
//
// Only one Build of a projection runs at a time, across processes (a
// session advisory lock): another one fails with ErrBuildInProgress, or
// waits (BuildOptions.Wait). A Build resumes a generation of its code
// version that is being built; one of another code version is marked
// failed ("superseded"). Retired generations are dropped first.
//
// The projection's SQL must use unqualified table names (the generation's
// schema comes first on the search_path); else ErrNoSchema.
//
// # In place
//
// With BuildOptions.InPlace, Build rebuilds the live generation from
// scratch instead: it empties its read model and gate state and replays
// the whole stream (BuildOptions.Replay) into it.
//
// While it runs, it holds the projection's rebuild lock — a session
// advisory lock on a dedicated pool connection — that every Process
// transaction and operator action of the projection takes in shared mode:
// live workers of the projection, in every process, pause until the rebuild
// ends (a batch that also feeds other projections pauses with it). It
// first waits for the transactions in flight to finish. The pool needs two
// connections beyond those the paused workers hold.
//
// In one transaction, it deletes the projection's version rows, applied
// log, parked and quarantined events and conflicts, calls its
// Tables.Reset (the projection must implement Tables; else
// ErrNotResettable) and records
// "rebuild-start" in the operator log. It then runs the replay, whose
// batches go through the gate of this projection only, and records
// "rebuild-done". The lock is released on return, also on error.
//
// A rebuild in place that fails or is killed half-way leaves the
// projection partly rebuilt; run it again: it always starts over from
// scratch. Readers see the read model half built meanwhile; the errors
// of side-by-side rebuilds (ErrBuildInProgress, ErrNoSchema,
// *VerificationError…) do not apply.
func (p *Processor) Build(ctx context.Context, projection string, opts *BuildOptions) (BuildResult, error) {
	if opts != nil && opts.InPlace {
		return p.inPlace(ctx, projection, opts)
	}
	r, ok := p.byName[projection]
	if !ok {
		return BuildResult{}, fmt.Errorf("%w: %q", ErrUnknownProjection, projection)
	}
	if opts == nil || opts.Stream == nil {
		return BuildResult{}, fmt.Errorf("projection %s: build: BuildOptions.Stream is required", projection)
	}
	o := generation.Options{Stream: genStream{opts.Stream}, BatchSize: cmp.Or(max(opts.BatchSize, 0), DefaultBuildBatch),
		MaxAggregates: cmp.Or(max(opts.MaxAggregates, 0), DefaultBuildAggregates),
		CatchUpEvents: cmp.Or(max(opts.CatchUpEvents, 0), DefaultCatchUpEvents), Retention: cmp.Or(opts.Retention, DefaultRetention),
		ExpectChanges: opts.ExpectChanges, VerifyTimeout: cmp.Or(max(opts.VerifyTimeout, 0), DefaultVerifyTimeout),
		Unlogged: opts.Unlogged, Wait: opts.Wait, By: opts.By, Hold: opts.Hold, Progress: buildProgress(opts.Progress)}
	if sp, ok := opts.Stream.(StreamProgress); ok {
		o.Fraction = sp.Fraction
	}
	start := time.Now()
	if _, err := p.feeding(ctx); err != nil { // records generation 1 if need be
		return BuildResult{Projection: projection, CodeVersion: r.version, Elapsed: time.Since(start)},
			fmt.Errorf("projection %s: build generation 0: %w", projection, err)
	}
	res, err := generation.Build(ctx, p.genEnv(), p.genProjection(r), o)
	var verr *generation.VerificationError
	if errors.As(err, &verr) {
		err = verificationError(verr)
	}
	return BuildResult(res), err
}

// genEnv returns what the rebuilds of p share.
func (p *Processor) genEnv() *generation.Env {
	return &generation.Env{Pool: p.pool, Store: p.store, Buffer: p.buf, Log: p.log, Policy: p.policy,
		Errors: generation.Errors{BuildInProgress: ErrBuildInProgress, NoSchema: ErrNoSchema, NoPrevious: ErrNoPrevious, NotReady: ErrNotReady}}
}

// genProjection describes r's projection to the rebuild.
func (p *Processor) genProjection(r *registered) generation.Projection {
	return generation.Projection{Name: r.name, Version: r.version, Lock: r.lockKey,
		BuildLock: advisoryKey64("inorder.build\x00" + p.cfg.Schema + "\x00" + r.name), Gate: rebuildGate{p: p, r: r}}
}

// verificationError returns the VerificationError of the rebuild's.
func verificationError(verr *generation.VerificationError) error {
	err := &VerificationError{Projection: verr.Projection, Generation: verr.Generation, Problems: verr.Problems}
	if verr.Also != nil {
		return errors.Join(err, verr.Also)
	}
	return err
}

// buildProgress returns the rebuild's progress function that calls fn, nil
// if fn is.
func buildProgress(fn func(BuildProgress)) func(generation.Progress) {
	if fn == nil {
		return nil
	}
	return func(pr generation.Progress) {
		fn(BuildProgress{Projection: pr.Projection, Generation: pr.Generation, Phase: pr.Phase, Events: pr.Events,
			PhaseEvents: pr.PhaseEvents, Elapsed: pr.Elapsed, Rate: pr.Rate, Fraction: pr.Fraction, ETA: pr.ETA,
			Position: pr.Position, Note: pr.Note})
	}
}

// genStream is a Stream as the rebuild reads it (generation.Stream).
type genStream struct{ s Stream }

// Read implements generation.Stream.
func (g genStream) Read(ctx context.Context, from []byte, fn func(ctx context.Context, b generation.StreamBatch) error) error {
	return g.s.Read(ctx, from, func(ctx context.Context, sb StreamBatch) error {
		gb := generation.StreamBatch{Events: sb.Events, Read: sb.Read, Position: sb.Position, Time: sb.Time}
		if len(sb.Rejects) > 0 {
			gb.Rejects = make([]generation.Reject, len(sb.Rejects))
			for i, r := range sb.Rejects {
				gb.Rejects[i] = generation.Reject(r)
			}
		}
		return fn(ctx, gb)
	})
}

// ErrNotResettable reports an in-place rebuild (Processor.Build with
// BuildOptions.InPlace) of a projection that does not implement Tables.
var ErrNotResettable = errors.New("projection does not implement Tables")

// Replay feeds a whole stream, from its start, to emit in batches, and
// returns when it reaches the end (the position the stream had when the
// replay began is enough: live workers deliver what comes after): the
// history an in-place rebuild replays (BuildOptions.Replay). Each emit
// call is one transaction through the gate; emit is safe for concurrent use,
// and its errors must be returned (a rebuild whose emit failed fails).
//
// A Stream, which a side-by-side rebuild reads, is read by one goroutine
// from a position; a Replay may emit from several goroutines (an
// aggregate's events in order), in batches of its own size.
type Replay func(ctx context.Context, emit func(ctx context.Context, events []aggregate.Event) error) error

// inPlace is Build with BuildOptions.InPlace: it rebuilds a projection from
// scratch, emptying its read model and gate state and replaying the whole
// stream into it (see Processor.Build, In place). Its errors name the
// projection and "rebuild" (side by side: "build generation N").
func (p *Processor) inPlace(ctx context.Context, projection string, opts *BuildOptions) (BuildResult, error) {
	began := time.Now()
	var res generation.Result
	res.Projection = projection
	err := p.runInPlace(ctx, projection, opts, &res)
	res.Elapsed = time.Since(began)
	return BuildResult(res), err
}

// runInPlace runs inPlace, filling res.
func (p *Processor) runInPlace(ctx context.Context, projection string, opts *BuildOptions, res *generation.Result) error {
	// In place: on the live generation, its gate key and its schema.
	r, err := p.liveTarget(ctx, projection)
	if err != nil {
		return err
	}
	tables, ok := r.p.(Tables)
	if !ok {
		return fmt.Errorf("projection %s: rebuild: %w", projection, ErrNotResettable)
	}
	res.Generation, res.CodeVersion = r.generation, r.version
	if opts.Replay == nil {
		return fmt.Errorf("projection %s: rebuild: BuildOptions.Replay is required in place", projection)
	}
	live := generation.Live{Key: r.key, Schema: r.schema, Generation: r.generation}
	return generation.InPlace(ctx, p.genEnv(), p.genProjection(r), live, tables,
		generation.InPlaceOptions{Replay: opts.Replay, Total: opts.Total, By: opts.By, Progress: buildProgress(opts.Progress)}, res)
}
