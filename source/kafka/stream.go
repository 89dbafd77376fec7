package kafka

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder/inorder/projection"
)

// This file makes a Replayer a projection.Stream: the history a
// side-by-side rebuild (projection.Processor.Build) reads, from a position.
// A position holds the offset of the last record read of every partition
// read so far: "topic/partition=offset,…".

// Read reads every partition from right after its offset in from (nil:
// from offset 0) up to its last stable offset when Read is called, and
// calls fn, from one goroutine, with the records of each fetch: the events
// mapped, records the mapping refuses as Rejects, and the position after
// them. It returns an error wrapping ErrTruncated when records after from
// were removed. Read implements projection.Stream.
func (r *Replayer) Read(ctx context.Context, from projection.Position, fn func(context.Context, projection.StreamBatch) error) error {
	after, err := decodeVector(from)
	if err != nil {
		return fmt.Errorf("kafka: read from %q: %w", from, err)
	}
	r.read.Store(0)
	cl, to, err := r.open(ctx, after)
	if err != nil || cl == nil {
		return err
	}
	defer cl.Close()
	pos := after
	return r.scan(ctx, cl, to, func(recs []*kgo.Record) error {
		sb := projection.StreamBatch{Read: int64(len(recs))}
		for _, rec := range recs {
			pos[Partition{rec.Topic, rec.Partition}] = rec.Offset
			sb.Time = latest(sb.Time, rec.Timestamp)
			if rec.Value == nil {
				continue // a tombstone
			}
			e, err := r.cfg.mapping.event(rec)
			if err != nil {
				sb.Rejects = append(sb.Rejects, projection.Reject{Event: e, Err: err})
				continue
			}
			sb.Events = append(sb.Events, e)
		}
		sb.Position = encodeVector(pos)
		return fn(ctx, sb)
	})
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func encodeVector(v map[Partition]int64) projection.Position {
	parts := make([]string, 0, len(v))
	for p, off := range v {
		parts = append(parts, p.String()+"="+strconv.FormatInt(off, 10))
	}
	slices.Sort(parts)
	return projection.Position(strings.Join(parts, ","))
}

func decodeVector(b projection.Position) (map[Partition]int64, error) {
	out := map[Partition]int64{}
	if len(b) == 0 {
		return out, nil
	}
	for _, item := range strings.Split(string(b), ",") {
		name, off, ok := strings.Cut(item, "=")
		i := strings.LastIndexByte(name, '/')
		if !ok || i <= 0 {
			return nil, fmt.Errorf("not a Kafka position: %q", item)
		}
		part, err1 := strconv.ParseInt(name[i+1:], 10, 32)
		n, err2 := strconv.ParseInt(off, 10, 64)
		if err1 != nil || err2 != nil || part < 0 || n < 0 {
			return nil, fmt.Errorf("not a Kafka position: %q", item)
		}
		out[Partition{name[:i], int32(part)}] = n
	}
	return out, nil
}
