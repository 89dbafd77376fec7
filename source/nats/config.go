package nats

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	natsc "github.com/nats-io/nats.go"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/internal/sourceutil"
)

// Defaults of Config.
const (
	DefaultName         = "nats"
	DefaultConsumer     = "inorder"
	DefaultReconnectMin = 100 * time.Millisecond
	DefaultReconnectMax = 10 * time.Second
	DefaultNakDelay     = 100 * time.Millisecond
	DefaultNakDelayMax  = 5 * time.Second
	DefaultLagEvery     = 5 * time.Second
	DefaultDrainTimeout = 30 * time.Second
	// DefaultShare is how many processes' full windows the default
	// MaxAckPending holds.
	DefaultShare = 4
	// MinAckWait and MaxAckWait bound the default AckWait.
	MinAckWait = 5 * time.Second
	MaxAckWait = 30 * time.Second
	// ackWaitPerEvent is the default AckWait per event a process may hold:
	// a window drains in that time at 1,000 events/s.
	ackWaitPerEvent = time.Millisecond
	// maxPullBatch caps the default PullBatch.
	maxPullBatch = 1000
)

// Config configures a Source. URL (or Conn), Stream and Processor are
// required; every other field has a default.
type Config struct {
	// URL is the NATS server URL, or several separated by commas (the
	// nodes of a cluster), such as "nats://127.0.0.1:4222". Required unless
	// Conn is set.
	URL string

	// Options are extra connection options (credentials, TLS, a name…),
	// applied after the source's own: reconnect for ever, with a buffer for
	// the acks sent while the connection is down.
	Options []natsc.Option

	// Conn, if set, is used instead of URL; the source does not close it.
	// It should reconnect for ever (natsc.MaxReconnects(-1)).
	Conn *natsc.Conn

	// Stream is the JetStream stream to consume. Required.
	Stream string

	// Consumer is the durable pull consumer's name: every process of one
	// deployment uses the same and shares its messages. Default "inorder".
	Consumer string

	// Subjects filter the stream's messages (the consumer's filter
	// subjects). Default: every message of the stream.
	Subjects []string

	// NoCreate makes the source use the consumer as it exists, without
	// creating or updating it (the operator owns its configuration). Run
	// fails with ErrRejected when it does not exist.
	NoCreate bool

	// FromEnd makes a consumer the source creates start with the messages
	// stored after its creation (DeliverNew) instead of the stream's first.
	FromEnd bool

	// Processor processes the deliveries. Required.
	Processor *projection.Processor

	// Name identifies the source: the source recorded with rejected events
	// and the label of its metrics. Default "nats".
	Name string

	// Mapping says where the aggregate id, version, type, id and metadata
	// are in a message. The zero value reads the headers that Publish sets.
	Mapping Mapping

	// Workers, BatchSize and MaxWait configure the partitioned workers
	// (see package source): defaults 4, 500 and 50 ms.
	Workers   int
	BatchSize int
	MaxWait   time.Duration

	// ReadAhead is the process's window: how many messages it holds
	// dispatched and not acknowledged. Default source.DefaultWindow:
	// 3 × Workers × BatchSize.
	ReadAhead int

	// PullBatch is how many messages a pull request asks for, and how many
	// the client buffers beyond the window. Default BatchSize, at most 1000.
	PullBatch int

	// MaxAckPending is the consumer's limit on messages delivered and not
	// acknowledged, over all its processes: past it the server sends
	// nothing until acks come. Default DefaultShare (4) × (ReadAhead +
	// PullBatch): full windows for four processes. With more processes the
	// limit binds; the source then notices that the server holds messages
	// back and closes partial batches at once instead of waiting MaxWait
	// (see the package documentation).
	MaxAckPending int

	// AckWait is how long the server waits for a message's ack before it
	// delivers it again (to any process of the consumer): what a process
	// that dies costs. Default (ReadAhead + PullBatch) × 1 ms — the time a
	// full window takes at 1,000 events/s — within [MinAckWait, MaxAckWait]
	// (5 s to 30 s). Messages held longer (a slow batch, a full window) get
	// in-progress acks every AckWait/3, so they are not redelivered while
	// this process works on them.
	AckWait time.Duration

	// NakDelay and NakDelayMax bound the delay of the redelivery asked for
	// a message whose batch failed, doubling with each delivery of the
	// message (jittered). Defaults 100 ms and 5 s.
	NakDelay, NakDelayMax time.Duration

	// ReconnectMin and ReconnectMax bound the exponential, jittered delay
	// between attempts to consume again after the consumer was lost (the
	// connection reconnects on its own). Defaults 100 ms and 10 s.
	ReconnectMin, ReconnectMax time.Duration

	// LagEvery is how often Run measures the lag (one consumer info request
	// and a message read per filter subject). Default 5 s; negative
	// disables it (MeasureLag still works).
	LagEvery time.Duration

	// DrainTimeout bounds the graceful stop of Run once its context is
	// cancelled; then in-flight batches are abandoned (rolled back, and
	// delivered again after AckWait). Default 30 s.
	DrainTimeout time.Duration

	// Logger receives the source's logs. Default: discarded.
	Logger *slog.Logger

	// OnSubscribed, if set, is called each time the source starts pulling
	// from the consumer.
	OnSubscribed func()

	// OnCommit, if set, is called after each committed batch, once its
	// messages are acknowledged. It runs on a worker goroutine and must not
	// block.
	OnCommit func(Commit)
}

// Commit describes one committed batch, for Config.OnCommit.
type Commit struct {
	// Deliveries is the number of messages in the batch, rejects included.
	Deliveries int
	// Outcomes counts the batch's deliveries by outcome.
	Outcomes map[projection.Outcome]int
}

// config is a validated Config with defaults applied.
type config struct {
	Config
	mapping *mapping
	dispCfg source.Config
	nak     func(delivered uint64) time.Duration
}

// newConfig validates cfg and applies its defaults. Processor is required
// unless noProcessor is set (a Replayer does not process).
func newConfig(cfg *Config, noProcessor bool) (*config, error) {
	if cfg == nil {
		return nil, errors.New("nats: nil Config")
	}
	c := &config{Config: *cfg}
	if c.Processor == nil && !noProcessor {
		return nil, errors.New("nats: Config.Processor is required")
	}
	if c.URL == "" && c.Conn == nil {
		return nil, errors.New("nats: Config.URL or Config.Conn is required")
	}
	if c.Stream == "" {
		return nil, errors.New("nats: Config.Stream is required")
	}
	if c.Workers < 0 || c.BatchSize < 0 || c.MaxWait < 0 || c.ReadAhead < 0 || c.PullBatch < 0 || c.MaxAckPending < 0 ||
		c.AckWait < 0 || c.NakDelay < 0 || c.NakDelayMax < 0 || c.ReconnectMin < 0 || c.ReconnectMax < 0 || c.DrainTimeout < 0 {
		return nil, errors.New("nats: negative Workers, BatchSize, MaxWait, ReadAhead, PullBatch, MaxAckPending, AckWait, NakDelay*, Reconnect* or DrainTimeout")
	}
	m, err := c.Mapping.parse()
	if err != nil {
		return nil, err
	}
	c.mapping = m
	c.Name = cmp.Or(c.Name, DefaultName)
	c.Consumer = cmp.Or(c.Consumer, DefaultConsumer)
	d := sourceutil.Dispatch{Workers: c.Workers, BatchSize: c.BatchSize, MaxWait: c.MaxWait, ReadAhead: c.ReadAhead, Logger: c.Logger}.Defaults()
	c.Workers, c.BatchSize, c.MaxWait, c.ReadAhead, c.Logger = d.Workers, d.BatchSize, d.MaxWait, d.ReadAhead, d.Logger
	c.dispCfg = d.Config(c.Processor, c.Name)
	c.PullBatch = cmp.Or(c.PullBatch, min(c.BatchSize, maxPullBatch))
	c.MaxAckPending = cmp.Or(c.MaxAckPending, DefaultShare*(c.ReadAhead+c.PullBatch))
	held := c.ReadAhead + c.PullBatch
	c.AckWait = cmp.Or(c.AckWait, min(max(time.Duration(held)*ackWaitPerEvent, MinAckWait), MaxAckWait))
	if c.AckWait < 100*time.Millisecond {
		return nil, fmt.Errorf("nats: Config.AckWait %s is below 100 ms", c.AckWait)
	}
	c.NakDelay = cmp.Or(c.NakDelay, DefaultNakDelay)
	c.NakDelayMax = max(cmp.Or(c.NakDelayMax, DefaultNakDelayMax), c.NakDelay)
	c.ReconnectMin = cmp.Or(c.ReconnectMin, DefaultReconnectMin)
	c.ReconnectMax = max(cmp.Or(c.ReconnectMax, DefaultReconnectMax), c.ReconnectMin)
	c.LagEvery = cmp.Or(c.LagEvery, DefaultLagEvery)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DefaultDrainTimeout)
	nakPolicy := retryPolicy(c.NakDelay, c.NakDelayMax)
	c.nak = func(delivered uint64) time.Duration { return nakPolicy.Delay(int(min(delivered, 64))) }
	return c, nil
}

// connect returns the connection to use and whether the source owns it.
func (c *config) connect(name string) (*natsc.Conn, bool, error) {
	if c.Conn != nil {
		return c.Conn, false, nil
	}
	log := c.Logger
	opts := []natsc.Option{
		natsc.Name(name),
		natsc.MaxReconnects(-1),
		natsc.RetryOnFailedConnect(true),
		natsc.ReconnectWait(250 * time.Millisecond),
		natsc.ReconnectJitter(100*time.Millisecond, time.Second),
		natsc.ReconnectBufSize(32 << 20),
		natsc.DisconnectErrHandler(func(_ *natsc.Conn, err error) {
			log.Warn("nats disconnected", "name", c.Name, "error", err)
		}),
		natsc.ErrorHandler(func(_ *natsc.Conn, _ *natsc.Subscription, err error) {
			log.Debug("nats async error", "name", c.Name, "error", err)
		}),
	}
	nc, err := natsc.Connect(c.URL, append(opts, c.Options...)...)
	if err != nil {
		return nil, false, fmt.Errorf("nats: connect: %w", err)
	}
	return nc, true, nil
}
