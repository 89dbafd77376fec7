package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/internal/envelope"
	"github.com/inorder/inorder/source/internal/sourceutil"
)

// Defaults of Config.
const (
	DefaultName            = "kafka"
	DefaultGroup           = "inorder"
	DefaultCheckpointEvery = time.Second
	DefaultLagEvery        = 5 * time.Second
	DefaultDrainTimeout    = 30 * time.Second
)

// Config configures a Source. Brokers, Topics and Processor are required;
// every other field has a default.
type Config struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string

	// Topics are the topics the group consumes. Required.
	Topics []string

	// Group is the Kafka consumer group: the processes of one group share
	// the topics' partitions. Default "inorder". The group's offsets in
	// Kafka are not used: the position of each partition is kept in
	// Postgres (see Name).
	Group string

	// Processor processes the records. Required (but by a Replayer).
	Processor *projection.Processor

	// Name identifies the source: its checkpoint rows in the checkpoints
	// table of Processor.Schema(), one per partition,
	// "<Name>/<topic>/<partition>", and the source recorded with rejected
	// records. Default "kafka".
	Name string

	// Mapping says where in a record each part of an event is. The zero
	// value reads the aggregate id from the record key and the rest from the
	// headers NewRecord sets.
	Mapping Mapping

	// FromEnd starts a partition that has no checkpoint at its end instead
	// of its beginning.
	FromEnd bool

	// Workers, BatchSize and MaxWait configure the partitioned workers
	// (see package source): defaults 4, 500 and 50 ms.
	Workers   int
	BatchSize int
	MaxWait   time.Duration

	// ReadAhead is the window: how many records may be dispatched and not
	// committed yet. Default source.DefaultWindow: 3 × Workers × BatchSize.
	ReadAhead int

	// CheckpointEvery is how often positions that moved without a batch —
	// past tombstones — are saved. Default 1 s.
	CheckpointEvery time.Duration

	// LagEvery is how often Run measures the lag (Source.Lag). Default 5 s;
	// negative disables it (MeasureLag still works).
	LagEvery time.Duration

	// DrainTimeout bounds the graceful stop of Run; then the batches in
	// flight are abandoned (rolled back, and consumed again by whoever owns
	// their partitions next). Default 30 s.
	DrainTimeout time.Duration

	// ClientOptions are added to the franz-go client's options, after the
	// source's own: TLS (kgo.DialTLSConfig), SASL (kgo.SASL), timeouts
	// (kgo.SessionTimeout, kgo.RebalanceTimeout), a balancer, the fetch
	// buffering (the source fetches from one broker at a time, at most
	// 1 MiB, 256 KiB per partition, a broker waiting at most 200 ms for
	// new records: kgo.MaxConcurrentFetches, kgo.FetchMaxBytes,
	// kgo.FetchMaxPartitionBytes, kgo.FetchMaxWait). Options that would
	// take the group's offsets out of Postgres (autocommit, a different
	// consumer) break the source's guarantees.
	ClientOptions []kgo.Opt

	// Logger receives the source's logs (and the client's, at warn level
	// and above). Default: discarded.
	Logger *slog.Logger

	// OnAssigned, if set, is called once partitions are assigned to this
	// process and their positions loaded, before their records are
	// fetched.
	OnAssigned func([]Partition)

	// OnRevoked, if set, is called once partitions were taken from this
	// process and their records in flight settled; lost is set when the
	// group session was lost rather than the partitions handed over.
	OnRevoked func(parts []Partition, lost bool)

	// OnCommit, if set, is called after each committed batch. It runs on a
	// worker goroutine and must not block.
	OnCommit func(Commit)
}

// Partition is a topic partition.
type Partition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

func (p Partition) String() string { return fmt.Sprintf("%s/%d", p.Topic, p.Partition) }

// Commit describes one committed batch, for Config.OnCommit.
type Commit struct {
	// Deliveries is the number of records in the batch, rejects included;
	// Rejected how many were recorded as rejected.
	Deliveries, Rejected int
	// Outcomes counts the processed records by outcome.
	Outcomes map[projection.Outcome]int
	// Offsets are the positions the batch's transaction stored: for each
	// partition it touched, the offset of the last record at or before
	// which every record is committed.
	Offsets map[Partition]int64
}

// config is a validated Config with defaults applied.
type config struct {
	Config
	mapping *mapping
	dispCfg source.Config
}

func newConfig(cfg *Config, noProcessor bool) (*config, error) {
	if cfg == nil {
		return nil, errors.New("kafka: nil Config")
	}
	c := &config{Config: *cfg}
	if c.Processor == nil && !noProcessor {
		return nil, errors.New("kafka: Config.Processor is required")
	}
	if len(c.Brokers) == 0 {
		return nil, errors.New("kafka: Config.Brokers is required")
	}
	if len(c.Topics) == 0 || slices.Contains(c.Topics, "") {
		return nil, errors.New("kafka: Config.Topics is required, without empty names")
	}
	if c.Workers < 0 || c.BatchSize < 0 || c.MaxWait < 0 || c.ReadAhead < 0 || c.CheckpointEvery < 0 || c.DrainTimeout < 0 {
		return nil, errors.New("kafka: negative Workers, BatchSize, MaxWait, ReadAhead, CheckpointEvery or DrainTimeout")
	}
	c.Name = cmp.Or(c.Name, DefaultName)
	c.Group = cmp.Or(c.Group, DefaultGroup)
	d := sourceutil.Dispatch{Workers: c.Workers, BatchSize: c.BatchSize, MaxWait: c.MaxWait, ReadAhead: c.ReadAhead, Logger: c.Logger}.Defaults()
	c.Workers, c.BatchSize, c.MaxWait, c.ReadAhead, c.Logger = d.Workers, d.BatchSize, d.MaxWait, d.ReadAhead, d.Logger
	c.dispCfg = d.Config(c.Processor, c.Name)
	c.CheckpointEvery = cmp.Or(c.CheckpointEvery, DefaultCheckpointEvery)
	c.LagEvery = cmp.Or(c.LagEvery, DefaultLagEvery)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DefaultDrainTimeout)
	m, err := c.Mapping.parse()
	if err != nil {
		return nil, err
	}
	c.mapping = m
	// Kafka puts the records of one key in one partition, which one member
	// of the group consumes at a time: with the aggregate read from the
	// key, no other process delivers this one's aggregates
	// (source.Config.Exclusive).
	c.dispCfg.Exclusive = m.Aggregate.Kind == envelope.Key
	return c, nil
}

// The client's fetch buffering (clientOptions); Config.ClientOptions may
// override them (kgo.MaxConcurrentFetches, kgo.FetchMaxBytes,
// kgo.FetchMaxPartitionBytes, kgo.FetchMaxWait).
const (
	maxConcurrentFetches   = 1
	fetchMaxBytes          = 1 << 20
	fetchMaxPartitionBytes = 256 << 10
	fetchMaxWait           = 200 * time.Millisecond
)

// clientOptions are the options every client of the source starts with.
func (c *config) clientOptions() []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(c.Brokers...),
		kgo.WithLogger(kgoLogger{c.Logger}),
		// Records of aborted transactions are never events.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// What the client buffers ahead of the window is memory, not
		// speed. By default it keeps a fetch in flight to every broker and
		// holds their records, decompressed, until polled: with 3 brokers
		// and a full window that was ~170 MB of live heap (516 MiB RSS at 1M
		// events). One fetch at a time, of at most fetchMaxBytes.
		kgo.MaxConcurrentFetches(maxConcurrentFetches),
		kgo.FetchMaxBytes(fetchMaxBytes),
		kgo.FetchMaxPartitionBytes(fetchMaxPartitionBytes),
		// With one fetch at a time, a fetch sent to a broker with nothing
		// new for this process holds every other broker's records back
		// for as long as the broker may wait (5 s by default): runs stalled
		// for seconds at a time (100k events: 8k/s against 40k/s before).
		kgo.FetchMaxWait(fetchMaxWait),
	}
}

// kgoLogger passes the client's warnings and errors to slog, both at warn
// level: the client retries what they report (a broker down, a group
// session to rejoin), and the source says itself what it cannot recover
// from.
type kgoLogger struct{ log *slog.Logger }

func (l kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	l.log.Log(context.Background(), slog.LevelWarn, "kafka client: "+msg, append(keyvals, "client_severity", level.String())...)
}
