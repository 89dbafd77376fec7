package esdb

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/internal/sourceutil"
)

// Defaults of Config.
const (
	DefaultName            = "esdb"
	DefaultCheckpointEvery = time.Second
	DefaultReconnectMin    = 100 * time.Millisecond
	DefaultReconnectMax    = 10 * time.Second
	DefaultRepairAfter     = 30 * time.Second
	DefaultRepairEvery     = 10 * time.Second
	DefaultRepairLimit     = 100
	DefaultDrainTimeout    = 30 * time.Second
	DefaultLagEvery        = 5 * time.Second
)

// Config configures a Source. URL (or Client) and Processor are required;
// every other field has a default.
type Config struct {
	// URL is the EventStoreDB connection string, such as
	// "esdb://localhost:2113?tls=false". Required unless Client is set.
	URL string

	// Client, if set, is used instead of URL. The source creates a new
	// client from it for every connection attempt (a v4 client whose node
	// discovery failed stays closed for good). When its Logger is nil (and
	// always with URL) the client logs to Logger at debug level.
	Client *esdbc.Configuration

	// Processor processes the deliveries. Required.
	Processor *projection.Processor

	// Name identifies the source: its checkpoint row in the checkpoints
	// table of Processor.Schema() (catch-up mode) and the source recorded
	// with rejected events. Two catch-up sources on one schema need
	// different names. Default "esdb".
	Name string

	// Persistent selects persistent-subscription mode (competing
	// consumers, the server keeps the position). Default nil: a catch-up
	// subscription to $all, resuming from the checkpoint kept in Postgres.
	Persistent *Persistent

	// StreamPrefixes filters $all on the server by stream name prefix.
	// Default: Mapping.StreamPrefix, when it is set.
	StreamPrefixes []string

	// TypeRegex keeps only the events whose type matches it: on the server
	// when there are no StreamPrefixes (a server filter is by stream or by
	// type), else on the client. When neither is set, the server filters
	// out system event types ("$…").
	TypeRegex string

	// FromEnd starts at the end of $all (or of the stream) instead of its
	// beginning: in catch-up mode when there is no checkpoint yet, in
	// persistent mode when the source creates the group.
	FromEnd bool

	// Mapping turns EventStoreDB events into inorder events. The zero value
	// uses the whole stream name as the aggregate id and revision+1 as the
	// version.
	Mapping Mapping

	// Workers, BatchSize and MaxWait configure the partitioned workers
	// (see package source): defaults 4, 500 and 50 ms.
	Workers   int
	BatchSize int
	MaxWait   time.Duration

	// ReadAhead is the catch-up window: how many events the source reads
	// ahead of what is committed. It must cover a batch in each worker's
	// transaction and the next one filling, or workers wait for input while
	// the server has events. Default source.DefaultWindow: 3 × Workers ×
	// BatchSize. (Persistent mode: Persistent.BufferSize.)
	ReadAhead int

	// CheckpointEvery is how often, in catch-up mode, the low watermark is
	// saved outside batch transactions — when only skipped events or
	// server checkpoints moved it. Default 1 s.
	CheckpointEvery time.Duration

	// TrustServerCheckpoints lets the checkpoint messages of a filtered
	// catch-up subscription move the saved checkpoint past events the
	// server filtered out, so a restart does not scan them again. Default
	// false: only positions of events the source received and committed
	// (or skipped) are saved — a restart after a long filtered-out tail
	// scans it again on the server, and nothing can be missed. Some server
	// releases sent checkpoints at positions whose events were not yet
	// delivered (KurrentDB 25.0.0 and 24.10 releases before the fix of
	// kurrent-io/KurrentDB#4970; EventStoreDB 22.10 before the fix of the
	// extra checkpoint on the switch to live): resuming from one skips the
	// next event. Set it only on releases without those bugs (see the
	// package documentation for the supported versions).
	TrustServerCheckpoints bool

	// ReconnectMin and ReconnectMax bound the exponential, jittered delay
	// between connection attempts after the server is lost. Defaults
	// 100 ms and 10 s.
	ReconnectMin, ReconnectMax time.Duration

	// RepairAfter is how long an event must have been parked, waiting for
	// missing versions, before the source reads those versions from the
	// aggregate's stream (gap repair). Default 30 s; negative disables gap
	// repair (do that when other sources feed the processor's schema: gap
	// repair assumes every aggregate is a stream of this EventStoreDB).
	RepairAfter time.Duration

	// RepairEvery is how often gap repair looks for waiting aggregates.
	// Default 10 s, or RepairAfter if that is shorter.
	RepairEvery time.Duration

	// RepairLimit caps the aggregates repaired per round. Default 100.
	RepairLimit int

	// LagEvery is how often Run measures the source's lag (Source.Lag):
	// one or two reads of at most a few hundred events from the server.
	// Default 5 s; negative disables it (Source.MeasureLag still works).
	LagEvery time.Duration

	// DrainTimeout bounds the graceful stop of Run once its context is
	// cancelled; then in-flight batches are abandoned (rolled back, and
	// delivered again on the next run). Default 30 s.
	DrainTimeout time.Duration

	// Logger receives the source's logs. Default: discarded.
	Logger *slog.Logger

	// OnSubscribed, if set, is called each time a subscription is
	// confirmed by the server.
	OnSubscribed func()

	// OnCaughtUp, if set, is called when a catch-up subscription reports
	// that it has caught up with the end of $all.
	OnCaughtUp func()

	// OnCommit, if set, is called after each committed batch, once its
	// deliveries are acknowledged. It runs on a worker goroutine and must
	// not block.
	OnCommit func(Commit)

	// OnCheckpoint, if set, is called each time the saved checkpoint
	// advances (catch-up mode), whether a batch's transaction or a save on
	// its own moved it. Calls are ordered and never overlap; it must not
	// block.
	OnCheckpoint func(esdbc.Position)

	// OnRepair, if set, is called after gap repair handled an aggregate.
	OnRepair func(Repair)
}

// Persistent configures persistent-subscription mode.
type Persistent struct {
	// Group is the subscription group. Required.
	Group string

	// Stream is the stream the group reads; "" means $all, filtered by
	// Config.StreamPrefixes and TypeRegex.
	Stream string

	// Settings are used when the source creates the group. Default:
	// DefaultSettings(Stream) — esdbc.SubscriptionSettingsDefault(),
	// resolving links for system streams such as "$ce-payment" — with the
	// consumer strategy chosen by the server's version: Pinned, which
	// sends each stream's events to one consumer so that competing
	// consumers rarely park, on a server where PinnedCheckpointsFixed;
	// RoundRobin, with a warning in the log, on others (Settings that ask
	// for a pinned strategy there are used, with a warning). Poison events
	// never reach the server's parked stream (the processor quarantines them), but every
	// failed batch nacks its events for a retry: MaxRetryCount bounds how
	// many failed batches an event survives before the server parks it —
	// gap repair then reads it from its stream.
	Settings *esdbc.PersistentSubscriptionSettings

	// NoCreate disables creating the group when it does not exist.
	NoCreate bool

	// BufferSize is how many unacknowledged events the server sends this
	// consumer at most: its window. It must cover a batch in each worker's
	// transaction and the next one filling, or workers wait for input
	// while the server has events. Default source.DefaultWindow: 3 ×
	// Workers × BatchSize. An event waits at most about BufferSize divided
	// by the consumer's throughput before it is acknowledged: keep that
	// well below the group's MessageTimeout (30 s by default), or the
	// server times events out and sends them again.
	BufferSize uint32
}

// DefaultSettings returns the settings a source creates a group on stream
// with ("" for $all) when Persistent.Settings is nil, but for the consumer
// strategy, which the source then chooses by the server's version (see
// Persistent.Settings): esdbc.SubscriptionSettingsDefault(), resolving links
// for system streams such as "$ce-payment".
func DefaultSettings(stream string) esdbc.PersistentSubscriptionSettings {
	st := esdbc.SubscriptionSettingsDefault()
	st.ResolveLinkTos = strings.HasPrefix(stream, "$")
	return st
}

// Commit describes one committed batch, for Config.OnCommit.
type Commit struct {
	// Deliveries is the number of deliveries in the batch, rejects
	// included.
	Deliveries int
	// Outcomes counts the batch's processed deliveries by outcome.
	Outcomes map[projection.Outcome]int
	// Checkpoint is the checkpoint the batch's transaction advanced the
	// saved one to (catch-up mode), if it did.
	Checkpoint *esdbc.Position
}

// Repair describes what gap repair did for one aggregate, for
// Config.OnRepair and Source.RepairNow.
type Repair struct {
	// Aggregate is the aggregate whose missing versions were looked for.
	Aggregate string
	// From and To are the missing versions looked for: what the projections
	// wait for, capped at 10,000 versions per repair.
	From, To int64
	// Found is how many of versions From…To the stream has. They were
	// processed: valid ones fed to the gate (counted in Fed), invalid ones
	// recorded as rejected.
	Found int
	// Fed is how many events read from the stream were processed.
	Fed int
	// Outcomes counts what became of the versions found, by outcome
	// ("applied", "parked", "duplicate", "conflict", "quarantined",
	// "rejected": the gate's Result.Outcome, and the events the mapping
	// refused): why a repair that found versions may apply nothing.
	Outcomes map[string]int
	// Absent lists the versions of From…To the stream does not have.
	Absent []VersionRange
	// Reason says why the stream has nothing to give — it does not exist,
	// or it is deleted — and is empty when the stream exists.
	Reason string
	// Missing is set when a version a projection waits for first is not in
	// the stream (deleted, truncated or never written): an operator_log row
	// 'gap-missing-at-source' records it, and an operator decides.
	Missing bool
	// Err is the error that stopped the repair, if any.
	Err error
}

// VersionRange is the versions From…To of an aggregate, both included.
type VersionRange struct {
	From, To int64
}

// String renders r as "from-to", or "v" when it is one version.
func (r VersionRange) String() string {
	if r.From == r.To {
		return strconv.FormatInt(r.From, 10)
	}
	return strconv.FormatInt(r.From, 10) + "-" + strconv.FormatInt(r.To, 10)
}

// config is a validated Config with defaults applied.
type config struct {
	Config
	client  esdbc.Configuration
	filter  *esdbc.SubscriptionFilter
	typeRe  *regexp.Regexp // client-side type filter of subscriptions, nil if none
	readRe  *regexp.Regexp // type filter of reads (gap repair, replay), nil if none
	dispCfg source.Config
	// autoStrategy is set when Persistent.Settings was nil: the source
	// picks the consumer strategy of a group it creates by the server's
	// version (chooseStrategy).
	autoStrategy bool
}

// newConfig validates cfg and applies its defaults. Processor is required
// unless noProcessor is set (a Replayer does not process).
func newConfig(cfg *Config, noProcessor bool) (*config, error) {
	if cfg == nil {
		return nil, errors.New("esdb: nil Config")
	}
	c := &config{Config: *cfg}
	if c.Processor == nil && !noProcessor {
		return nil, errors.New("esdb: Config.Processor is required")
	}
	switch {
	case c.Client != nil:
		c.client = *c.Client
	case c.URL != "":
		parsed, err := esdbc.ParseConnectionString(c.URL)
		if err != nil {
			return nil, fmt.Errorf("esdb: Config.URL: %w", err)
		}
		c.client = *parsed
		c.client.Logger = nil // the client's default prints to the standard logger
	default:
		return nil, errors.New("esdb: Config.URL or Config.Client is required")
	}
	if c.Workers < 0 || c.BatchSize < 0 || c.MaxWait < 0 || c.ReadAhead < 0 || c.CheckpointEvery < 0 ||
		c.ReconnectMin < 0 || c.ReconnectMax < 0 || c.RepairEvery < 0 || c.RepairLimit < 0 || c.DrainTimeout < 0 {
		return nil, errors.New("esdb: negative Workers, BatchSize, MaxWait, ReadAhead, CheckpointEvery, Reconnect*, RepairEvery, RepairLimit or DrainTimeout")
	}
	c.Name = cmp.Or(c.Name, DefaultName)
	d := sourceutil.Dispatch{Workers: c.Workers, BatchSize: c.BatchSize, MaxWait: c.MaxWait, ReadAhead: c.ReadAhead, Logger: c.Logger}.Defaults()
	c.Workers, c.BatchSize, c.MaxWait, c.ReadAhead, c.Logger = d.Workers, d.BatchSize, d.MaxWait, d.ReadAhead, d.Logger
	c.dispCfg = d.Config(c.Processor, c.Name)
	c.CheckpointEvery = cmp.Or(c.CheckpointEvery, DefaultCheckpointEvery)
	c.ReconnectMin = cmp.Or(c.ReconnectMin, DefaultReconnectMin)
	c.ReconnectMax = max(cmp.Or(c.ReconnectMax, DefaultReconnectMax), c.ReconnectMin)
	c.RepairAfter = cmp.Or(c.RepairAfter, DefaultRepairAfter)
	c.RepairEvery = cmp.Or(c.RepairEvery, min(DefaultRepairEvery, max(c.RepairAfter, time.Millisecond)))
	c.RepairLimit = cmp.Or(c.RepairLimit, DefaultRepairLimit)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DefaultDrainTimeout)
	c.LagEvery = cmp.Or(c.LagEvery, DefaultLagEvery)
	if c.client.Logger == nil {
		log := c.Logger
		c.client.Logger = func(level esdbc.LogLevel, format string, args ...any) {
			log.Debug("esdb client: "+fmt.Sprintf(format, args...), "level", level)
		}
	}
	if c.Persistent != nil {
		p := *c.Persistent
		if p.Group == "" {
			return nil, errors.New("esdb: Persistent.Group is required")
		}
		if p.BufferSize == 0 {
			p.BufferSize = uint32(source.DefaultWindow(c.Workers, c.BatchSize))
		}
		if p.Settings == nil {
			st := DefaultSettings(p.Stream)
			p.Settings = &st
			c.autoStrategy = true
		}
		c.Persistent = &p
	}
	if len(c.StreamPrefixes) == 0 && c.Mapping.StreamPrefix != "" {
		c.StreamPrefixes = []string{c.Mapping.StreamPrefix}
	}
	if c.TypeRegex != "" {
		re, err := regexp.Compile(c.TypeRegex)
		if err != nil {
			return nil, fmt.Errorf("esdb: Config.TypeRegex: %w", err)
		}
		if len(c.StreamPrefixes) > 0 {
			c.typeRe = re
		}
		c.readRe = re
	}
	switch {
	case len(c.StreamPrefixes) > 0:
		c.filter = &esdbc.SubscriptionFilter{Type: esdbc.StreamFilterType, Prefixes: c.StreamPrefixes}
	case c.TypeRegex != "":
		c.filter = &esdbc.SubscriptionFilter{Type: esdbc.EventFilterType, Regex: c.TypeRegex}
	default:
		c.filter = esdbc.ExcludeSystemEventsFilter()
	}
	if c.Persistent != nil {
		// The server sends at most BufferSize unacknowledged events: when
		// that many are in flight, nothing more comes until a batch commits.
		c.dispCfg.MaxInFlight = int(c.Persistent.BufferSize)
	}
	return c, nil
}

// mapEvent maps an event a subscription delivered, applying the client-side
// type filter (the server applied the rest).
func (c *config) mapEvent(r *esdbc.RecordedEvent) (aggregate.Event, error) {
	if c.typeRe != nil && r != nil && !c.typeRe.MatchString(r.EventType) {
		return aggregate.Event{}, fmt.Errorf("%w: type %s does not match %s", ErrSkipped, r.EventType, c.typeRe)
	}
	return c.Mapping.Map(r)
}

// mapRead maps an event read from a stream or from $all, applying on the
// client every filter a subscription applies: the stream prefixes and the
// type regex. Gap repair and replay see what the workers see.
func (c *config) mapRead(r *esdbc.RecordedEvent) (aggregate.Event, error) {
	if r != nil && len(c.StreamPrefixes) > 0 && !slices.ContainsFunc(c.StreamPrefixes, func(p string) bool { return strings.HasPrefix(r.StreamID, p) }) {
		return aggregate.Event{}, fmt.Errorf("%w: stream %s is outside the stream prefixes", ErrSkipped, r.StreamID)
	}
	if c.readRe != nil && r != nil && !c.readRe.MatchString(r.EventType) {
		return aggregate.Event{}, fmt.Errorf("%w: type %s does not match %s", ErrSkipped, r.EventType, c.readRe)
	}
	return c.Mapping.Map(r)
}

// newClient returns a fresh client: a v4 client whose discovery failed is
// closed for good, so every session (and every repair round or replay) gets
// its own.
func (c *config) newClient() (*esdbc.Client, error) {
	cfg := c.client
	cl, err := esdbc.NewClient(&cfg)
	if err != nil {
		return nil, fmt.Errorf("esdb: client: %w", err)
	}
	return cl, nil
}
