package kafka

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder/inorder/source/internal/sourceutil"
)

// probeTimeout bounds how long a lag measurement waits for the first
// record behind of each lagging partition (its timestamp is the lag in
// seconds).
const probeTimeout = 3 * time.Second

// Lag is how far the group is behind the end of its topics, from the
// checkpoints in Postgres — so every member measures the whole group's lag,
// the same figures. Every projection of the processor processes every batch
// in the same transaction, so the projections' lag is the source's.
type Lag struct {
	// Source is Config.Name, Group the consumer group.
	Source string `json:"source"`
	Group  string `json:"group"`
	// Known is false until a measurement succeeded.
	Known bool `json:"known"`
	// MeasuredAt is when the brokers were last asked.
	MeasuredAt time.Time `json:"measured_at,omitzero"`
	// Events counts the records not committed yet, over all partitions:
	// for each, its last stable offset (the end a read_committed consumer
	// sees) minus the offset after its checkpoint.
	Events int64 `json:"events"`
	// Behind is the age of the oldest record not committed (by its
	// timestamp), 0 when Events is 0 (BehindSeconds in JSON).
	Behind        time.Duration `json:"-"`
	BehindSeconds float64       `json:"behind_seconds"`
	// Estimated is set when the first record behind of some partition
	// could not be read in time: Behind leaves it out.
	Estimated bool `json:"estimated,omitempty"`
	// Err is the error of the last measurement, if it failed; the figures
	// are those of the one before.
	Err string `json:"error,omitempty"`
	// Partitions has the figures of each partition.
	Partitions []PartitionLag `json:"partitions"`
	// Projections has one entry per projection of the processor.
	Projections []ProjectionLag `json:"projections"`
}

// PartitionLag is one partition's lag.
type PartitionLag struct {
	Partition
	// End is the partition's last stable offset: the offset the next
	// committed record will take.
	End int64 `json:"end"`
	// Checkpoint is the offset of the last record at or before which every
	// record is committed; -1 when the partition has no checkpoint yet.
	Checkpoint int64 `json:"checkpoint"`
	// Events and Behind are as in Lag, for this partition.
	Events        int64         `json:"events"`
	Behind        time.Duration `json:"-"`
	BehindSeconds float64       `json:"behind_seconds"`
	// Owned is set when this process owns the partition.
	Owned bool `json:"owned,omitempty"`
}

// ProjectionLag is one projection's lag behind the source.
type ProjectionLag struct {
	Projection    string        `json:"projection"`
	Events        int64         `json:"events"`
	Behind        time.Duration `json:"-"`
	BehindSeconds float64       `json:"behind_seconds"`
}

// Lag returns the lag as of the last measurement (Run measures every
// Config.LagEvery; MeasureLag measures now). It does no I/O.
func (s *Source) Lag() Lag {
	s.lagMu.Lock()
	defer s.lagMu.Unlock()
	l := s.lag
	l.Partitions = slices.Clone(l.Partitions)
	l.Projections = slices.Clone(l.Projections)
	return l
}

// MeasureLag measures the lag now, with or without Run.
func (s *Source) MeasureLag(ctx context.Context) (Lag, error) {
	cl, err := kgo.NewClient(s.cfg.clientOptions()...)
	if err != nil {
		return s.Lag(), fmt.Errorf("kafka: client: %w", err)
	}
	defer cl.Close()
	return s.measure(ctx, kadm.NewClient(cl))
}

func (s *Source) measure(ctx context.Context, adm *kadm.Client) (Lag, error) {
	l, err := s.compute(ctx, adm)
	return sourceutil.Keep(&s.lagMu, &s.lag, l, err, func(last *Lag, err error) { last.Err = err.Error() }), err
}

func (s *Source) compute(ctx context.Context, adm *kadm.Client) (Lag, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	now := time.Now()
	ends, err := adm.ListCommittedOffsets(ctx, s.cfg.Topics...)
	if err != nil {
		return Lag{}, fmt.Errorf("kafka: lag: list end offsets: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, s.cfg.Topics...)
	if err != nil {
		return Lag{}, fmt.Errorf("kafka: lag: list start offsets: %w", err)
	}
	stored, err := storedOffsets(ctx, s.cfg.Processor, s.cfg.Name)
	if err != nil {
		return Lag{}, err
	}
	s.mu.Lock()
	owned := maps.Clone(s.parts)
	s.mu.Unlock()

	l := Lag{Source: s.cfg.Name, Group: s.cfg.Group, Known: true, MeasuredAt: now, Partitions: []PartitionLag{}, Projections: []ProjectionLag{}}
	probe := map[Partition]int64{}
	var errs []error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("%s/%d: %w", o.Topic, o.Partition, o.Err))
			return
		}
		pl := PartitionLag{Partition: Partition{o.Topic, o.Partition}, End: o.Offset, Checkpoint: -1}
		next := int64(0)
		if off, ok := stored[pl.Partition]; ok {
			pl.Checkpoint, next = off, off+1
		} else if s.cfg.FromEnd {
			next = o.Offset
		} else if st, ok := starts.Lookup(o.Topic, o.Partition); ok && st.Err == nil {
			next = st.Offset
		}
		pl.Events = max(0, o.Offset-next)
		if p := owned[pl.Partition]; p != nil {
			pl.Owned = true
			if old, ok := p.tracker.Oldest(); ok && pl.Events > 0 {
				pl.Behind = max(0, now.Sub(old.at))
			}
		}
		if pl.Events > 0 && pl.Behind == 0 {
			probe[pl.Partition] = next
		}
		l.Partitions = append(l.Partitions, pl)
	})
	if len(errs) > 0 {
		return Lag{}, fmt.Errorf("kafka: lag: %v", errs)
	}
	if len(probe) > 0 {
		firsts := s.firstRecords(ctx, probe)
		for i := range l.Partitions {
			pl := &l.Partitions[i]
			if _, asked := probe[pl.Partition]; !asked {
				continue
			}
			r, ok := firsts[pl.Partition]
			switch {
			case !ok:
				l.Estimated = true
			case r.off >= pl.End:
				// Only control records (transaction markers) lie between
				// the checkpoint and the end: nothing is behind.
				pl.Events = 0
			default:
				pl.Events = pl.End - r.off
				pl.Behind = max(0, now.Sub(r.at))
			}
		}
	}
	slices.SortFunc(l.Partitions, func(a, b PartitionLag) int {
		if a.Topic != b.Topic {
			return compareStrings(a.Topic, b.Topic)
		}
		return int(a.Partition.Partition - b.Partition.Partition)
	})
	for i := range l.Partitions {
		pl := &l.Partitions[i]
		pl.BehindSeconds = pl.Behind.Seconds()
		l.Events += pl.Events
		l.Behind = max(l.Behind, pl.Behind)
	}
	l.BehindSeconds = l.Behind.Seconds()
	if s.cfg.Processor != nil {
		for _, name := range s.cfg.Processor.Projections() {
			l.Projections = append(l.Projections, ProjectionLag{Projection: name, Events: l.Events, Behind: l.Behind, BehindSeconds: l.BehindSeconds})
		}
	}
	return l, nil
}

// firstRecords reads the first record at or after each partition's offset,
// for its timestamp, waiting at most probeTimeout.
func (s *Source) firstRecords(ctx context.Context, from map[Partition]int64) map[Partition]rpos {
	parts := map[string]map[int32]kgo.Offset{}
	for p, off := range from {
		if parts[p.Topic] == nil {
			parts[p.Topic] = map[int32]kgo.Offset{}
		}
		parts[p.Topic][p.Partition] = kgo.NewOffset().At(off)
	}
	out := map[Partition]rpos{}
	cl, err := kgo.NewClient(append(s.cfg.clientOptions(), kgo.ConsumePartitions(parts),
		kgo.FetchMaxWait(200*time.Millisecond), kgo.FetchMaxPartitionBytes(64<<10))...)
	if err != nil {
		return out
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	for len(out) < len(from) && ctx.Err() == nil {
		fs := cl.PollRecords(ctx, 1000)
		fs.EachRecord(func(r *kgo.Record) {
			p := Partition{r.Topic, r.Partition}
			if _, ok := out[p]; !ok {
				out[p] = rpos{off: r.Offset, at: r.Timestamp}
				cl.PauseFetchPartitions(map[string][]int32{r.Topic: {r.Partition}})
			}
		})
	}
	return out
}
