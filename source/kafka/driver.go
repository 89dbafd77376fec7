package kafka

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/internal/sourceutil"
)

// This file holds the source's Driver: how a worker binary (package cli)
// opens it from a URL and its flags.

// Driver returns the source's driver, for package cli (cli.Config.Sources):
//
//	inorder run --source 'kafka://broker1:9092,broker2:9092/payments?group=inorder'
//
// The URL names the seed brokers, the topics (its path, comma-separated,
// or --kafka-topic) and optionally the group (?group=, or --kafka-group);
// kafka+tls:// connects with TLS. The mapping flags (--aggregate-from,
// --version-from, --type-from, --id-from) are the NATS source's too. Rebuild
// replays the topics from offset 0, and refuses, saying why, topics whose
// retention removed records (ErrTruncated).
func Driver() source.Driver { return driver{} }

type driver struct{}

func (driver) Schemes() []string { return []string{"kafka", "kafka+tls"} }

func (driver) Title() string { return "Kafka" }

type flags struct {
	fs                               *pflag.FlagSet
	command                          string
	Topics                           []string
	Group                            string
	Aggregate, Version, Type, ID     string
	ReadAhead                        int
	SessionTimeout, RebalanceTimeout time.Duration
}

func (driver) Bind(fs *pflag.FlagSet, command string) source.Opener {
	o := &flags{fs: fs, command: command}
	fs.StringArrayVar(&o.Topics, "kafka-topic", nil, "Kafka `topic` to consume (repeatable; default: the URL's path, comma-separated)")
	fs.StringVar(&o.Aggregate, "aggregate-from", "", "where the aggregate id is: key, header:NAME, field:PATH (Kafka default key)")
	fs.StringVar(&o.Version, "version-from", "", "where the version is: header:NAME or field:PATH (default header:Inorder-Version)")
	fs.StringVar(&o.Type, "type-from", "", "where the event type is (default header:Inorder-Type)")
	fs.StringVar(&o.ID, "id-from", "", "where the stable event id is; absent: <aggregate>:<version> (Kafka default header:Inorder-Id)")
	for name, env := range map[string]string{"kafka-topic": "INORDER_KAFKA_TOPIC"} {
		_ = fs.SetAnnotation(name, source.FlagEnvAnnotation, []string{env})
	}
	if command != "run" {
		return o
	}
	fs.StringVar(&o.Group, "kafka-group", "", "Kafka consumer `group` the processes share (default: the URL's ?group=, else inorder)")
	fs.IntVar(&o.ReadAhead, "read-ahead", 0, "records dispatched ahead of the commits (default 3 × workers × batch size)")
	fs.DurationVar(&o.SessionTimeout, "kafka-session-timeout", 0, "Kafka group session timeout: how long a dead process keeps its partitions (default 45s)")
	fs.DurationVar(&o.RebalanceTimeout, "kafka-rebalance-timeout", 0, "Kafka rebalance timeout: how long a process may take to drain a partition it gives up (default 60s)")
	_ = fs.SetAnnotation("kafka-group", source.FlagEnvAnnotation, []string{"INORDER_KAFKA_GROUP"})
	return o
}

// target is a parsed source URL.
type target struct {
	brokers, topics []string
	group           string
	tls             bool
}

func parseURL(raw string) (target, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return target{}, fmt.Errorf("invalid Kafka URL: %w", err)
	}
	t := target{tls: u.Scheme == "kafka+tls", group: u.Query().Get("group")}
	if u.Scheme != "kafka" && !t.tls {
		return t, fmt.Errorf("invalid Kafka URL %q: the scheme must be kafka:// or kafka+tls://", raw)
	}
	for _, b := range strings.Split(u.Host, ",") {
		if b != "" {
			t.brokers = append(t.brokers, b)
		}
	}
	if len(t.brokers) == 0 {
		return t, fmt.Errorf("invalid Kafka URL %q: no broker (kafka://host:9092/topic)", raw)
	}
	for _, p := range strings.Split(strings.Trim(u.Path, "/"), ",") {
		if p != "" {
			t.topics = append(t.topics, p)
		}
	}
	return t, nil
}

func (o *flags) target(raw string) (target, error) {
	t, err := parseURL(raw)
	if err != nil {
		return t, err
	}
	if len(o.Topics) > 0 {
		t.topics = slices.Clone(o.Topics)
	}
	if len(t.topics) == 0 {
		return t, fmt.Errorf("no Kafka topic: name them in the URL's path (kafka://host:9092/payments) or with --kafka-topic")
	}
	if o.Group != "" {
		t.group = o.Group
	}
	return t, nil
}

func (o *flags) Validate(raw string) error {
	if _, err := o.target(raw); err != nil {
		return err
	}
	if _, err := o.mapping().parse(); err != nil {
		return err
	}
	switch {
	case o.ReadAhead < 0:
		return fmt.Errorf("--read-ahead must not be negative")
	case o.SessionTimeout < 0 || o.RebalanceTimeout < 0:
		return fmt.Errorf("--kafka-session-timeout and --kafka-rebalance-timeout must not be negative")
	}
	return nil
}

func (o *flags) mapping() Mapping {
	return Mapping{Aggregate: o.Aggregate, Version: o.Version, Type: o.Type, ID: o.ID}
}

func (o *flags) config(raw string, oc *source.OpenConfig) (*Config, error) {
	t, err := o.target(raw)
	if err != nil {
		return nil, err
	}
	cfg := &Config{
		Brokers: t.brokers, Topics: t.topics, Group: t.group, Processor: oc.Processor, Name: oc.Name,
		Mapping: o.mapping(), FromEnd: oc.FromEnd, Workers: oc.Workers, BatchSize: oc.BatchSize, MaxWait: oc.MaxWait,
		ReadAhead: o.ReadAhead, DrainTimeout: oc.DrainTimeout, Logger: oc.Logger,
	}
	if t.tls {
		cfg.ClientOptions = append(cfg.ClientOptions, kgo.DialTLSConfig(&tls.Config{MinVersion: tls.VersionTLS12}))
	}
	if o.SessionTimeout > 0 {
		cfg.ClientOptions = append(cfg.ClientOptions, kgo.SessionTimeout(o.SessionTimeout))
	}
	if o.RebalanceTimeout > 0 {
		cfg.ClientOptions = append(cfg.ClientOptions, kgo.RebalanceTimeout(o.RebalanceTimeout))
	}
	if ready := oc.OnReady; ready != nil {
		cfg.OnAssigned = func([]Partition) { ready() }
	}
	return cfg, nil
}

func (o *flags) Open(_ context.Context, raw string, oc *source.OpenConfig) (source.Feed, error) {
	cfg, err := o.config(raw, oc)
	return sourceutil.Open(cfg, err, New)
}

// Replayer returns the topics' history, or an error wrapping ErrTruncated
// that says which partitions lost records, before any rebuild begins.
func (o *flags) Replayer(ctx context.Context, raw string, oc *source.OpenConfig) (source.Replayer, error) {
	cfg, err := o.config(raw, oc)
	if err != nil {
		return nil, err
	}
	given := false
	for _, name := range []string{"aggregate-from", "version-from", "type-from", "id-from"} {
		if f := o.fs.Lookup(name); f != nil && f.Changed {
			given = true
		}
	}
	if cfg.Mapping, err = readWith(ctx, oc.Processor, oc.Name, given, cfg.Mapping, oc.Note); err != nil {
		return nil, err
	}
	cfg.Processor = nil
	r, err := NewReplayer(cfg)
	if err != nil {
		return nil, err
	}
	if err := r.Check(ctx); err != nil {
		return nil, err
	}
	return replayer{r}, nil
}

// replayer is a Replayer as a source.Replayer.
type replayer struct{ *Replayer }

func (r replayer) Progress() source.ReplayProgress {
	p := r.Replayer.Progress()
	f := 0.0
	if p.Total > 0 {
		f = min(float64(p.Read)/float64(p.Total), 1)
	}
	return source.ReplayProgress{Read: p.Read, Fraction: f}
}
