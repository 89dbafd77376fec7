package esdb

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/spf13/pflag"

	"github.com/inorder/inorder/source"
)

// This file holds the source's Driver: how a worker binary (package cli)
// opens it from a URL and its flags.

// Modes of the driver's --mode flag.
const (
	ModeCatchUp    = "catch-up"
	ModePersistent = "persistent"
)

// strategyAuto is --consumer-strategy's default: the source chooses by the
// server's version (Persistent.Settings).
const strategyAuto = "auto"

var consumerStrategies = []string{
	strategyAuto, string(esdbc.ConsumerStrategyRoundRobin), string(esdbc.ConsumerStrategyDispatchToSingle), string(esdbc.ConsumerStrategyPinned),
}

// Driver returns the source's driver, for package cli (cli.Config.Sources):
// 'run --source esdb://host:2113?tls=false' and its flags (--mode, --group,
// --stream-prefix…), rebuild's replay of $all and parked repair. It opens
// esdb:// and esdb+discover:// URLs, and kurrentdb:// and
// kurrentdb+discover:// as their synonyms.
func Driver() source.Driver { return driver{} }

type driver struct{}

func (driver) Schemes() []string {
	return []string{"esdb", "esdb+discover", "kurrentdb", "kurrentdb+discover"}
}

func (driver) Title() string { return "EventStoreDB" }

// flags are the driver's flags for one command.
type flags struct {
	command      string
	fs           *pflag.FlagSet
	StreamPrefix string
	TypeRegex    string
	VersionField string

	// run only.
	Mode                   string
	Group                  string
	Stream                 string
	BufferSize             int
	ReadAhead              int
	Strategy               string
	TrustServerCheckpoints bool
	RepairAfter            time.Duration
}

func (driver) Bind(fs *pflag.FlagSet, command string) source.Opener {
	o := &flags{command: command, fs: fs}
	fs.StringVar(&o.StreamPrefix, "stream-prefix", "", "category `prefix` of the aggregates' streams, removed to get aggregate ids (\"payment-\": stream payment-42 is aggregate 42); other streams are ignored. Default: every non-system stream, named as its aggregate")
	fs.StringVar(&o.TypeRegex, "type-regex", "", "only events whose type matches this `regex`")
	fs.StringVar(&o.VersionField, "version-field", "", "metadata `field` holding the aggregate version (default: stream revision + 1)")
	if command != "run" {
		return o
	}
	fs.StringVar(&o.Mode, "mode", ModeCatchUp, "`mode`: catch-up or persistent")
	fs.StringVar(&o.Group, "group", "inorder", "persistent subscription `group`")
	fs.StringVar(&o.Stream, "stream", "", "persistent mode: the `stream` the group reads (default $all)")
	fs.IntVar(&o.BufferSize, "buffer-size", 0, "persistent mode: unacknowledged events the server may send this process (default 3 × workers × batch size)")
	fs.StringVar(&o.Strategy, "consumer-strategy", strategyAuto, "persistent mode, when the group is created: auto (Pinned on servers whose Pinned groups keep their checkpoints right, RoundRobin on others; see the esdb package documentation), RoundRobin, DispatchToSingle or Pinned (each stream's events to one consumer: fewer parked events)")
	fs.IntVar(&o.ReadAhead, "read-ahead", 0, "catch-up mode: events read ahead of the commits (default 3 × workers × batch size)")
	fs.BoolVar(&o.TrustServerCheckpoints, "trust-server-checkpoints", false, "catch-up mode: let the server's checkpoints move the saved position past filtered-out events (only on server releases without KurrentDB#4970; see the esdb package documentation)")
	fs.DurationVar(&o.RepairAfter, "repair-after", DefaultRepairAfter, "gap repair: read the missing versions of aggregates parked this long from their stream (negative disables)")
	return o
}

// ClientURL returns url with the kurrentdb schemes replaced by the esdb ones
// the client parses.
func ClientURL(url string) string {
	for _, s := range []string{"kurrentdb+discover", "kurrentdb"} {
		if rest, ok := strings.CutPrefix(url, s+"://"); ok {
			return strings.Replace(s, "kurrentdb", "esdb", 1) + "://" + rest
		}
	}
	return url
}

func (o *flags) Validate(url string) error {
	if _, err := esdbc.ParseConnectionString(ClientURL(url)); err != nil {
		return fmt.Errorf("invalid EventStoreDB URL: %w", err)
	}
	if _, err := regexp.Compile(o.TypeRegex); err != nil {
		return fmt.Errorf("invalid --type-regex: %w", err)
	}
	if o.command != "run" {
		return nil
	}
	switch o.Mode {
	case ModeCatchUp:
		if o.Stream != "" {
			return fmt.Errorf("--stream needs --mode persistent")
		}
	case ModePersistent:
		if o.Group == "" {
			return fmt.Errorf("--group must not be empty")
		}
	default:
		return fmt.Errorf("--mode must be %s or %s, not %q", ModeCatchUp, ModePersistent, o.Mode)
	}
	switch {
	case o.BufferSize < 0:
		return fmt.Errorf("--buffer-size must not be negative")
	case o.ReadAhead < 0:
		return fmt.Errorf("--read-ahead must not be negative")
	case !slices.Contains(consumerStrategies, o.Strategy):
		return fmt.Errorf("--consumer-strategy must be one of %s, not %q", strings.Join(consumerStrategies, ", "), o.Strategy)
	}
	return nil
}

// given reports whether the command line (or the environment) gives a
// mapping of its own.
func (o *flags) given() bool {
	for _, name := range mappingFlags {
		if f := o.fs.Lookup(name); f != nil && f.Changed {
			return true
		}
	}
	return false
}

// readConfig is config for a repair or a rebuild: with the mapping the
// workers recorded, unless the flags give one (source.Repairer).
func (o *flags) readConfig(ctx context.Context, url string, oc *source.OpenConfig, name string) (*Config, error) {
	cfg := o.config(url, oc)
	m, re, err := readWith(ctx, oc.Processor, name, o.given(), cfg.Mapping, cfg.TypeRegex, oc.Note)
	if err != nil {
		return nil, err
	}
	cfg.Mapping, cfg.TypeRegex = m, re
	return cfg, nil
}

// config returns the Config the flags and oc describe.
func (o *flags) config(url string, oc *source.OpenConfig) *Config {
	return &Config{
		URL: ClientURL(url), Processor: oc.Processor, Name: oc.Name, TypeRegex: o.TypeRegex, FromEnd: oc.FromEnd,
		Mapping: Mapping{StreamPrefix: o.StreamPrefix, VersionField: o.VersionField},
		Workers: oc.Workers, BatchSize: oc.BatchSize, MaxWait: oc.MaxWait, ReadAhead: o.ReadAhead,
		RepairAfter: o.RepairAfter, DrainTimeout: oc.DrainTimeout, Logger: oc.Logger, OnSubscribed: oc.OnReady,
		TrustServerCheckpoints: o.TrustServerCheckpoints,
	}
}

func (o *flags) Open(_ context.Context, url string, oc *source.OpenConfig) (source.Feed, error) {
	cfg := o.config(url, oc)
	if o.Mode == ModePersistent {
		cfg.Persistent = &Persistent{Group: o.Group, Stream: o.Stream, BufferSize: uint32(o.BufferSize)}
		if o.Strategy != strategyAuto {
			st := DefaultSettings(o.Stream)
			st.ConsumerStrategyName = esdbc.ConsumerStrategy(o.Strategy)
			cfg.Persistent.Settings = &st
		}
	}
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return s.Feed(), nil
}

func (o *flags) Replayer(ctx context.Context, url string, oc *source.OpenConfig) (source.Replayer, error) {
	cfg, err := o.readConfig(ctx, url, oc, oc.Name)
	if err != nil {
		return nil, err
	}
	cfg.Processor = nil
	r, err := NewReplayer(cfg)
	if err != nil {
		return nil, err
	}
	return replayer{r}, nil
}

// replayer is a Replayer as a source.Replayer.
type replayer struct{ *Replayer }

func (r replayer) Progress() source.ReplayProgress {
	p := r.Replayer.Progress()
	return source.ReplayProgress{Read: p.Read, Skipped: p.Skipped, Fraction: p.Fraction}
}

func (o *flags) Repair(ctx context.Context, url string, oc *source.OpenConfig, opts *source.RepairOptions) ([]source.Repair, error) {
	cfg, err := o.readConfig(ctx, url, oc, oc.Name)
	if err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = "repair"
	}
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	reps, err := s.RepairNow(ctx, &RepairOptions{Projection: opts.Projection, Generation: opts.Generation, Aggregate: opts.Aggregate,
		OlderThan: opts.OlderThan, Limit: opts.Limit, DryRun: opts.DryRun})
	out := make([]source.Repair, 0, len(reps))
	for _, r := range reps {
		sr := source.Repair{Aggregate: r.Aggregate, From: r.From, To: r.To, Found: r.Found, Reason: r.Reason, Outcomes: r.Outcomes}
		for _, a := range r.Absent {
			sr.Missing = append(sr.Missing, a.String())
		}
		out = append(out, sr)
	}
	return out, err
}
