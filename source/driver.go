package source

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// Driver opens one kind of source for a worker binary. Package cli's run,
// rebuild and parked repair commands take a source URL (--source) and
// choose the driver by its scheme; a binary hands its drivers to cli.Config,
// so the library CLI links only the sources its binary chooses. Each source
// package provides its driver (esdb.Driver, pgtable.Driver…).
type Driver interface {
	// Schemes are the URL schemes the driver opens, without "://":
	// "esdb", "esdb+discover", "postgres"… A --source without "://"
	// (such as "postgres") is taken as a scheme alone.
	Schemes() []string

	// Title names the source in help texts and errors: "EventStoreDB".
	Title() string

	// Bind binds the driver's own flags for command ("run", "rebuild" or
	// "repair") on fs and returns what opens the source once they are
	// parsed. Flag names must not clash with the command's own or another
	// driver's. A flag takes its value from an environment variable named
	// by the pflag annotation FlagEnvAnnotation, if set.
	Bind(fs *pflag.FlagSet, command string) Opener
}

// FlagEnvAnnotation is the pflag annotation by which a driver names the
// environment variable of one of its flags:
//
//	fs.SetAnnotation("pg-table", source.FlagEnvAnnotation, []string{"INORDER_PG_TABLE"})
const FlagEnvAnnotation = "inorder_env"

// Opener opens a source configured by a Driver's flags.
type Opener interface {
	// Validate checks the URL and the flags; its error is a usage error.
	Validate(url string) error

	// Open returns the source at url feeding cfg.Processor, not started.
	Open(ctx context.Context, url string, cfg *OpenConfig) (Feed, error)

	// Replayer returns the source's history, for a rebuild: read in order
	// from its start, mapped and filtered as Open's source does.
	Replayer(ctx context.Context, url string, cfg *OpenConfig) (Replayer, error)
}

// Repairer is implemented by Openers whose source can read the missing
// versions of an aggregate on demand (gap repair: 'parked repair').
//
// A repair and a rebuild read the source as its workers do: when the
// command line gives no mapping of its own (the driver's mapping flags,
// set neither on it nor by their environment variables), the driver reads
// with the mapping the workers recorded in the processor's schema when they
// started (projection.Processor.RecordSource, SourceInfo.Mapping; Open's
// source records it) — the one source of its kind recorded, or the one
// OpenConfig.Name names — and says so through OpenConfig.Note. Mapping
// flags that differ from the workers' win, with a note. Every source
// records its mapping and follows this rule.
type Repairer interface {
	Repair(ctx context.Context, url string, cfg *OpenConfig, opts *RepairOptions) ([]Repair, error)
}

// OpenConfig is what a command asks of the source it opens.
type OpenConfig struct {
	// Processor is the processor to feed (and, for a Repairer, to repair
	// through). For a Replayer it is the processor whose schema holds the
	// workers' recorded mappings (see Repairer), or nil: the replay feeds
	// nothing itself.
	Processor *projection.Processor
	// DatabaseURL and Schema are the processor's database (--database-url)
	// and inorder's schema in it (--schema), for a source whose events may
	// live there.
	DatabaseURL, Schema string
	// Name is the source's name: its checkpoint row, group or durable
	// consumer, and the source label of its metrics.
	Name string
	// Workers, BatchSize and MaxWait configure its dispatcher (Config).
	Workers, BatchSize int
	MaxWait            time.Duration
	// FromEnd starts a source without a checkpoint at the end of what it
	// reads.
	FromEnd bool
	// DrainTimeout bounds a graceful stop.
	DrainTimeout time.Duration
	// Logger receives its logs.
	Logger *slog.Logger
	// OnReady, if set, is called once the source is subscribed or holds
	// its share of the work (readiness).
	OnReady func()
	// Note, if set, receives what a repair or a rebuild decided for the
	// operator: the mapping it reads the source with, and why.
	Note func(msg string)
}

// Replayer is a source's history as both rebuilds read it: side by side
// (projection.Stream, for Processor.Build) and in place (Replay, a
// projection.Replay for Processor.Build with BuildOptions.InPlace).
type Replayer interface {
	projection.Stream
	// Replay reads the history up to its end when called and emits it in
	// batches, an aggregate's events in order, from several goroutines.
	Replay(ctx context.Context, emit func(context.Context, []aggregate.Event) error) error
	// Progress says how far the running (or last) read is.
	Progress() ReplayProgress
}

// ReplayProgress is how far a replay is.
type ReplayProgress struct {
	// Read counts the records read; Skipped those that were not for the
	// projections (other streams, system events).
	Read, Skipped int64
	// Fraction is how far the read is through the history, 0 to 1.
	Fraction float64
}

// RepairOptions chooses what a repair reads.
type RepairOptions struct {
	// Projection and Aggregate narrow it to one projection or aggregate.
	Projection, Aggregate string
	// Generation, if positive, repairs the aggregates waiting in that
	// generation of the projections instead of their live one
	// (projection.ListOptions.Generation).
	Generation int
	// DryRun feeds what the source has through the gate in transactions
	// that are rolled back (projection.Batch.DryRun) and records nothing:
	// the Repairs say what a repair would do.
	DryRun bool
	// OlderThan repairs only aggregates whose oldest parked event waited
	// at least this long.
	OlderThan time.Duration
	// Limit bounds the aggregates repaired.
	Limit int
}

// Repair is what a repair did for one aggregate.
type Repair struct {
	Aggregate string
	// From and To are the versions looked for; Found how many of them the
	// source had (they were processed).
	From, To int64
	Found    int
	// Missing lists the versions the source does not have, as ranges
	// ("4" or "4-7").
	Missing []string
	// Reason says why the source had nothing, if it had nothing.
	Reason string
	// Outcomes counts what became of the versions found, by outcome
	// (projection.Outcome's names: applied, parked, duplicate, conflict,
	// quarantined, rejected): why a repair that found versions may apply
	// nothing.
	Outcomes map[string]int
}
