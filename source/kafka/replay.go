package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/inorder/inorder/source/internal/sourceutil"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder/inorder/aggregate"
)

// ErrTruncated is returned (wrapped, with the partitions and offsets) by
// Replayer.Check and Replayer.Replay when the topics no longer hold every
// record ever produced to them — retention or DeleteRecords moved a
// partition's log start past offset 0, or the topic is compacted — so a
// rebuild from them would silently miss events. Rebuild from a source that
// keeps the whole history (an event store, a topic with retention.ms=-1
// and cleanup.policy=delete), or restore the read model instead.
var ErrTruncated = errors.New("kafka: the topic no longer holds its whole history")

// replayIdle is how long a replay waits for a record before it takes the
// partitions it has not read to their end as done: their last offsets are
// transaction markers, which carry no record.
const replayIdle = 10 * time.Second

// Replayer replays Kafka topics from their first offset into a projection
// being rebuilt: its Replay method is a projection.Replay for an in-place
// projection.Processor.Build (BuildOptions.InPlace). It reads every partition up to its last
// stable offset when the replay begins, maps records as a Source of the
// same Config does, and emits them in batches, partitioned by aggregate
// across workers so that each aggregate's versions arrive in order. Records
// produced after that are the live workers' to apply.
type Replayer struct {
	cfg         *config
	read, total atomic.Int64
}

// NewReplayer validates cfg and returns a Replayer that reads cfg.Topics
// from cfg.Brokers (with cfg.ClientOptions), maps records with cfg.Mapping
// and emits batches of up to BatchSize events from Workers goroutines.
// Processor may be nil; the other fields are ignored.
func NewReplayer(cfg *Config) (*Replayer, error) {
	c, err := newConfig(cfg, true)
	if err != nil {
		return nil, err
	}
	return &Replayer{cfg: c}, nil
}

// ReplayProgress is how far a replay is.
type ReplayProgress struct {
	// Read counts the records read; Total the records (offsets) the replay
	// reads in all.
	Read, Total int64
}

// Progress returns how far the running (or the last) replay is.
func (r *Replayer) Progress() ReplayProgress {
	return ReplayProgress{Read: r.read.Load(), Total: r.total.Load()}
}

func (r *Replayer) client(opts ...kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append(append(r.cfg.clientOptions(), r.cfg.ClientOptions...), opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: client: %w", err)
	}
	return cl, nil
}

// Check returns an error wrapping ErrTruncated when the topics cannot be
// replayed whole, and nil when they can.
func (r *Replayer) Check(ctx context.Context) error {
	cl, err := r.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	_, _, err = r.bounds(ctx, kadm.NewClient(cl), nil)
	return err
}

// bounds returns the offsets to read, per partition: from the one after
// the offset in after (0 for a partition not in it) to the last stable
// offset (exclusive), after checking nothing to read is missing.
func (r *Replayer) bounds(ctx context.Context, adm *kadm.Client, after map[Partition]int64) (map[string]map[int32]kgo.Offset, map[Partition]int64, error) {
	cfgs, err := adm.DescribeTopicConfigs(ctx, r.cfg.Topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka: describe topics: %w", err)
	}
	var problems []string
	for _, tc := range cfgs {
		if tc.Err != nil {
			return nil, nil, fmt.Errorf("kafka: describe topic %s: %w", tc.Name, tc.Err)
		}
		for _, c := range tc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil && strings.Contains(*c.Value, "compact") {
				problems = append(problems, fmt.Sprintf("topic %s is compacted (cleanup.policy=%s)", tc.Name, *c.Value))
			}
		}
	}
	starts, err := adm.ListStartOffsets(ctx, r.cfg.Topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka: list start offsets: %w", err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, r.cfg.Topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka: list end offsets: %w", err)
	}
	if err := starts.Error(); err != nil {
		return nil, nil, fmt.Errorf("kafka: list start offsets: %w", err)
	}
	from := map[string]map[int32]kgo.Offset{}
	to := map[Partition]int64{}
	var total int64
	starts.Each(func(o kadm.ListedOffset) {
		next := int64(0)
		if off, ok := after[Partition{o.Topic, o.Partition}]; ok {
			next = off + 1
		}
		if o.Offset > next {
			problems = append(problems, fmt.Sprintf("partition %s/%d starts at offset %d: offsets %d-%d were removed (retention or DeleteRecords)", o.Topic, o.Partition, o.Offset, next, o.Offset-1))
		}
		end, ok := ends.Lookup(o.Topic, o.Partition)
		if !ok || end.Err != nil || end.Offset <= next {
			return
		}
		if from[o.Topic] == nil {
			from[o.Topic] = map[int32]kgo.Offset{}
		}
		from[o.Topic][o.Partition] = kgo.NewOffset().At(next)
		to[Partition{o.Topic, o.Partition}] = end.Offset
		total += end.Offset - next
	})
	if len(problems) > 0 {
		return nil, nil, fmt.Errorf("%w: %s", ErrTruncated, strings.Join(problems, "; "))
	}
	r.total.Store(total)
	return from, to, nil
}

// Replay reads the topics up to their current end and calls emit with
// batches of mapped events, from several goroutines: an aggregate's events
// all go to one of them, in partition order. A record the mapping cannot
// turn into a valid envelope is emitted as it is, and the processor records
// it as rejected. It returns an error wrapping ErrTruncated, before
// emitting anything, when the topics no longer hold their whole history.
// Replay implements projection.Replay.
func (r *Replayer) Replay(ctx context.Context, emit func(context.Context, []aggregate.Event) error) error {
	r.read.Store(0)
	r.total.Store(0)
	cl, to, err := r.open(ctx, nil)
	if err != nil || cl == nil {
		return err
	}
	defer cl.Close()

	return sourceutil.FanOut(ctx, r.cfg.Workers, r.cfg.BatchSize, emit, func(ctx context.Context, send func(aggregate.Event) error) error {
		return r.scan(ctx, cl, to, func(recs []*kgo.Record) error {
			for _, rec := range recs {
				if rec.Value == nil {
					continue // a tombstone
				}
				e, _ := r.cfg.mapping.event(rec) // an invalid one is the processor's to reject
				if err := send(e); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// open checks the topics and returns a client reading every partition from
// after the offsets in after up to its end, and those ends; a nil client
// when there is nothing to read.
func (r *Replayer) open(ctx context.Context, after map[Partition]int64) (*kgo.Client, map[Partition]int64, error) {
	meta, err := r.client()
	if err != nil {
		return nil, nil, err
	}
	from, to, err := r.bounds(ctx, kadm.NewClient(meta), after)
	meta.Close()
	if err != nil || len(to) == 0 {
		return nil, nil, err
	}
	cl, err := r.client(kgo.ConsumePartitions(from))
	if err != nil {
		return nil, nil, err
	}
	return cl, to, nil
}

// scan polls until every partition was read to its end, and calls fn, from
// this goroutine, with the records of each poll (in offset order within
// each partition).
func (r *Replayer) scan(ctx context.Context, cl *kgo.Client, to map[Partition]int64, fn func([]*kgo.Record) error) error {
	left := len(to)
	done := map[Partition]bool{}
	for left > 0 {
		pctx, cancel := context.WithTimeout(ctx, replayIdle)
		fs := cl.PollRecords(pctx, r.cfg.BatchSize)
		idle := pctx.Err() != nil && ctx.Err() == nil
		cancel()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if idle && fs.NumRecords() == 0 {
			r.cfg.Logger.Warn("kafka replay: no record for a while; taking the partitions not read to their end as done (transaction markers at their end)",
				"partitions", left, "idle", replayIdle)
			return nil
		}
		var err error
		fs.EachError(func(topic string, part int32, e error) {
			if err == nil && !errors.Is(e, context.DeadlineExceeded) && !errors.Is(e, context.Canceled) {
				err = fmt.Errorf("kafka: replay %s/%d: %w", topic, part, e)
			}
		})
		if err != nil {
			return err
		}
		recs := make([]*kgo.Record, 0, fs.NumRecords())
		fs.EachRecord(func(rec *kgo.Record) {
			p := Partition{rec.Topic, rec.Partition}
			end := to[p]
			if done[p] || rec.Offset >= end {
				return
			}
			r.read.Add(1)
			if rec.Offset >= end-1 {
				done[p] = true
				left--
				cl.PauseFetchPartitions(map[string][]int32{rec.Topic: {rec.Partition}})
			}
			recs = append(recs, rec)
		})
		if len(recs) > 0 {
			if err := fn(recs); err != nil {
				return err
			}
		}
	}
	return nil
}
