package nats

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/internal/sourceutil"
)

// This file holds the source's Driver: how the worker binary (package cli)
// opens it from a URL and its flags.

// Driver returns the source's driver, for package cli (cli.Config.Sources):
// 'run --source nats://host:4222/STREAM' and its flags (--nats-stream,
// --nats-consumer, --nats-subject, the mapping flags…), and rebuild's
// replay of the stream. The URL names one or more servers
// ("nats://a:4222,b:4222/STREAM"); its path is the stream (or
// --nats-stream), its query may set consumer= and subject= (repeatable).
func Driver() source.Driver { return driver{} }

type driver struct{}

func (driver) Schemes() []string { return []string{"nats"} }

func (driver) Title() string { return "NATS JetStream" }

type flags struct {
	command    string
	fs         *pflag.FlagSet
	Stream     string
	Consumer   string
	Subjects   []string
	Aggregate  string
	Version    string
	Type       string
	ID         string
	Metadata   string
	ReadAhead  int
	MaxPending int
	AckWait    time.Duration
	NoCreate   bool
	Incomplete bool
}

// mappingFlags are the flags that give a mapping of its own.
var mappingFlags = []string{"aggregate-from", "version-from", "type-from", "id-from", "nats-subject"}

func (driver) Bind(fs *pflag.FlagSet, command string) source.Opener {
	o := &flags{command: command, fs: fs}
	fs.StringVar(&o.Stream, "nats-stream", "", "JetStream `stream` to consume (default: the URL's path)")
	fs.StringArrayVar(&o.Subjects, "nats-subject", nil, "filter `subject` of the consumer (repeatable; default: the whole stream, or the URL's ?subject=)")
	fs.StringVar(&o.Aggregate, "aggregate-from", "", "where the aggregate id is: header:NAME, field:PATH, subject:N (NATS default header:Inorder-Aggregate)")
	fs.StringVar(&o.Version, "version-from", "", "where the version is: header:NAME or field:PATH (default header:Inorder-Version)")
	fs.StringVar(&o.Type, "type-from", "", "where the event type is (default header:Inorder-Type)")
	fs.StringVar(&o.ID, "id-from", "", "where the stable event id is; absent: <aggregate>:<version> (NATS default header:Nats-Msg-Id)")
	if command == "rebuild" {
		fs.BoolVar(&o.Incomplete, "nats-allow-incomplete", false, "rebuild from a stream whose retention or a purge removed messages (the rebuild misses them)")
	}
	if command != "run" {
		return o
	}
	fs.StringVar(&o.Consumer, "nats-consumer", "", "durable consumer `name` the processes share (default: the URL's ?consumer=, else inorder)")
	// Replicas of one deployment (docker compose --scale) share it.
	_ = fs.SetAnnotation("nats-consumer", source.FlagEnvAnnotation, []string{"INORDER_NATS_CONSUMER"})
	fs.IntVar(&o.ReadAhead, "read-ahead", 0, "messages dispatched ahead of the commits (default 3 × workers × batch size)")
	fs.IntVar(&o.MaxPending, "nats-max-ack-pending", 0, "the consumer's MaxAckPending over all its processes (default 4 × (read-ahead + batch size))")
	fs.DurationVar(&o.AckWait, "nats-ack-wait", 0, "the consumer's AckWait: what a killed process costs before its messages go to another (default (read-ahead + batch size) × 1ms, within 5s..30s)")
	fs.BoolVar(&o.NoCreate, "nats-no-create", false, "use the durable consumer as it exists: do not create or update it")
	return o
}

// target is what a nats:// URL says.
type target struct {
	servers, stream, consumer string
	subjects                  []string
}

func parseURL(raw string) (target, error) {
	var t target
	rest, ok := strings.CutPrefix(raw, "nats://")
	if !ok {
		return t, fmt.Errorf("not a nats:// URL")
	}
	rest, query, _ := strings.Cut(rest, "?")
	hosts, path, _ := strings.Cut(rest, "/")
	if hosts == "" {
		return t, fmt.Errorf("no server in the URL")
	}
	var servers []string
	for _, h := range strings.Split(hosts, ",") {
		servers = append(servers, "nats://"+h)
	}
	t.servers = strings.Join(servers, ",")
	t.stream = strings.Trim(path, "/")
	q, err := url.ParseQuery(query)
	if err != nil {
		return t, fmt.Errorf("query: %w", err)
	}
	t.consumer = q.Get("consumer")
	t.subjects = q["subject"]
	return t, nil
}

func (o *flags) Validate(raw string) error {
	t, err := parseURL(raw)
	if err != nil {
		return fmt.Errorf("invalid NATS URL: %w", err)
	}
	if o.Stream == "" && t.stream == "" {
		return fmt.Errorf("name the stream: nats://host:4222/STREAM or --nats-stream")
	}
	if _, err := o.mapping().parse(); err != nil {
		return err
	}
	if o.ReadAhead < 0 || o.MaxPending < 0 || o.AckWait < 0 {
		return fmt.Errorf("--read-ahead, --nats-max-ack-pending and --nats-ack-wait must not be negative")
	}
	return nil
}

func (o *flags) mapping() Mapping {
	return Mapping{Aggregate: o.Aggregate, Version: o.Version, Type: o.Type, ID: o.ID}
}

func (o *flags) config(raw string, oc *source.OpenConfig) (*Config, error) {
	t, err := parseURL(raw)
	if err != nil {
		return nil, err
	}
	c := &Config{
		URL: t.servers, Stream: or(o.Stream, t.stream), Consumer: or(o.Consumer, t.consumer), Subjects: o.Subjects,
		NoCreate: o.NoCreate, FromEnd: oc.FromEnd, Processor: oc.Processor, Name: oc.Name, Mapping: o.mapping(),
		Workers: oc.Workers, BatchSize: oc.BatchSize, MaxWait: oc.MaxWait, ReadAhead: o.ReadAhead,
		MaxAckPending: o.MaxPending, AckWait: o.AckWait, DrainTimeout: oc.DrainTimeout, Logger: oc.Logger, OnSubscribed: oc.OnReady,
	}
	if len(c.Subjects) == 0 {
		c.Subjects = t.subjects
	}
	return c, nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (o *flags) Open(_ context.Context, raw string, oc *source.OpenConfig) (source.Feed, error) {
	cfg, err := o.config(raw, oc)
	return sourceutil.Open(cfg, err, New)
}

// Replayer returns the stream's replay for a rebuild, with the mapping the
// workers recorded unless the flags give one.
func (o *flags) Replayer(ctx context.Context, raw string, oc *source.OpenConfig) (source.Replayer, error) {
	cfg, err := o.config(raw, oc)
	if err != nil {
		return nil, err
	}
	if err := o.useRecorded(ctx, cfg, oc); err != nil {
		return nil, err
	}
	cfg.Processor = nil
	r, err := NewReplayer(cfg)
	if err != nil {
		return nil, err
	}
	r.AllowIncomplete = o.Incomplete
	return replayer{r}, nil
}

// useRecorded applies the mapping the workers of cfg.Name recorded (the only
// NATS source recorded when the name is not given), unless the command line
// gives a mapping of its own.
func (o *flags) useRecorded(ctx context.Context, cfg *Config, oc *source.OpenConfig) error {
	if oc.Processor == nil {
		return nil
	}
	for _, name := range mappingFlags {
		if f := o.fs.Lookup(name); f != nil && f.Changed {
			return nil
		}
	}
	infos, err := oc.Processor.Sources(ctx, Kind)
	if err != nil {
		return fmt.Errorf("nats: recorded sources: %w", err)
	}
	for _, info := range infos {
		if oc.Name != "" && info.Name != oc.Name {
			continue
		}
		if oc.Name == "" && len(infos) > 1 {
			return fmt.Errorf("nats: %d NATS sources are recorded in the schema: name one with --name", len(infos))
		}
		var rec recorded
		if err := json.Unmarshal(info.Mapping, &rec); err != nil {
			return fmt.Errorf("nats: recorded mapping of %s: %w", info.Name, err)
		}
		cfg.Mapping, cfg.Subjects = rec.Mapping, rec.Subjects
		if oc.Note != nil {
			oc.Note(fmt.Sprintf("reading stream %s with the mapping the workers of source %q recorded", cfg.Stream, info.Name))
		}
		return nil
	}
	return nil
}

type replayer struct{ *Replayer }

func (r replayer) Progress() source.ReplayProgress {
	p := r.Replayer.Progress()
	return source.ReplayProgress{Read: p.Read, Fraction: p.Fraction}
}
