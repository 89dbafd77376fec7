package kafka

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/inorder/inorder/source"
)

// This file holds the group's callbacks. With kgo.BlockRebalanceOnPoll they
// run between two polls, never while the poll loop holds records it has not
// dispatched:
//
//   - assigned: partitions were given to this process (logged);
//   - adjust: their offsets were fetched from Kafka (the source never
//     commits any there): each partition is set to start after its
//     checkpoint in Postgres, or at its start (end with FromEnd) when it has
//     none, and its tracker starts from that checkpoint;
//   - release (revoked or lost): everything dispatched is committed first —
//     the records in flight of the partitions being given up included —
//     then their watermarks are saved and the partitions forgotten. Only
//     then does the group hand them to another member, which resumes from
//     what was committed: a handover loses nothing and repeats nothing that
//     committed.

func (s *Source) assigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	s.log.Info("kafka partitions assigned", "name", s.cfg.Name, "group", s.cfg.Group, "partitions", fmtParts(m))
}

// adjust starts the fetched partitions from their checkpoints.
func (s *Source) adjust(ctx context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	stored, err := storedOffsets(ctx, s.cfg.Processor, s.cfg.Name)
	if err != nil {
		// The group session restarts and asks again.
		s.log.Warn("kafka checkpoints not loaded", "name", s.cfg.Name, "error", err)
		return nil, err
	}
	var parts []Partition
	for topic, ps := range offsets {
		for part := range ps {
			parts = append(parts, Partition{topic, part})
		}
	}
	slices.SortFunc(parts, func(a, b Partition) int {
		if a.Topic != b.Topic {
			return compareStrings(a.Topic, b.Topic)
		}
		return int(a.Partition - b.Partition)
	})
	s.checkTruncation(ctx, parts, stored)
	for _, pt := range parts {
		p := &partition{Partition: pt, cpName: checkpointName(s.cfg.Name, pt), tracker: source.NewTracker[rpos]()}
		off, ok := stored[pt]
		switch {
		case ok:
			p.tracker.Reset(rpos{off: off}, true)
			p.saved.Store(off)
			offsets[pt.Topic][pt.Partition] = kgo.NewOffset().At(off + 1).WithEpoch(-1)
		case s.cfg.FromEnd:
			p.saved.Store(-1)
			offsets[pt.Topic][pt.Partition] = kgo.NewOffset().AtEnd()
		default:
			p.saved.Store(-1)
			offsets[pt.Topic][pt.Partition] = kgo.NewOffset().AtStart()
		}
		s.mu.Lock()
		s.parts[pt] = p
		s.mu.Unlock()
	}
	s.stats.assigned.Add(int64(len(parts)))
	s.log.Info("kafka partitions resumed from their checkpoints", "name", s.cfg.Name, "partitions", len(parts))
	if s.cfg.OnAssigned != nil {
		s.cfg.OnAssigned(parts)
	}
	return offsets, nil
}

// checkTruncation warns about, and counts, the records that retention (or
// DeleteRecords) removed from the partitions before the source consumed
// them: a partition whose log starts after the record following its
// checkpoint (or, with no checkpoint, after 0 unless FromEnd). Their
// aggregates' later versions park until an operator declares the gap.
func (s *Source) checkTruncation(ctx context.Context, parts []Partition, stored map[Partition]int64) {
	if len(parts) == 0 {
		return
	}
	topics := map[string]bool{}
	for _, p := range parts {
		topics[p.Topic] = true
	}
	cl, err := kgo.NewClient(s.cfg.clientOptions()...)
	if err != nil {
		return
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, sortedKeys(topics)...)
	if err != nil {
		s.log.Warn("kafka log start offsets not listed: retention losses not checked", "name", s.cfg.Name, "error", err)
		return
	}
	for _, p := range parts {
		start, ok := starts.Lookup(p.Topic, p.Partition)
		if !ok || start.Err != nil {
			continue
		}
		next := int64(0)
		if off, ok := stored[p]; ok {
			next = off + 1
		} else if s.cfg.FromEnd {
			continue
		}
		if start.Offset > next {
			s.stats.truncated.Add(start.Offset - next)
			s.log.Error("kafka records removed before they were consumed (retention or DeleteRecords): their aggregates' later versions will park",
				"name", s.cfg.Name, "topic", p.Topic, "partition", p.Partition, "from", next, "to", start.Offset-1, "records", start.Offset-next)
		}
	}
}

// release drains and forgets partitions revoked or lost.
func (s *Source) release(m map[string][]int32, lost bool) {
	var parts []*partition
	s.mu.Lock()
	for topic, ps := range m {
		for _, part := range ps {
			if p := s.parts[Partition{topic, part}]; p != nil {
				parts = append(parts, p)
			}
		}
	}
	s.mu.Unlock()
	if len(parts) == 0 {
		return
	}
	began := time.Now()
	// Commit what is in flight: the revoked partitions' records and, since
	// batches mix partitions, the others' too.
	flushed := s.disp.Flush(s.hard) == nil
	if flushed {
		if err := s.saveWatermarks(s.hard, parts); err != nil {
			s.log.Warn("kafka checkpoint not saved at revocation", "name", s.cfg.Name, "error", err)
		}
	}
	out := make([]Partition, len(parts))
	s.mu.Lock()
	for i, p := range parts {
		delete(s.parts, p.Partition)
		out[i] = p.Partition
	}
	s.mu.Unlock()
	if lost {
		s.stats.lost.Add(int64(len(parts)))
		s.log.Warn("kafka partitions lost (group session ended)", "name", s.cfg.Name, "partitions", out, "drained", flushed, "in", time.Since(began))
	} else {
		s.stats.revoked.Add(int64(len(parts)))
		s.log.Info("kafka partitions revoked", "name", s.cfg.Name, "partitions", out, "drained", flushed, "in", time.Since(began))
	}
	if s.cfg.OnRevoked != nil {
		s.cfg.OnRevoked(out, lost)
	}
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func fmtParts(m map[string][]int32) string {
	var out []string
	for _, t := range sortedKeys(func() map[string]bool {
		k := map[string]bool{}
		for t := range m {
			k[t] = true
		}
		return k
	}()) {
		ps := slices.Clone(m[t])
		slices.Sort(ps)
		out = append(out, fmt.Sprintf("%s%v", t, ps))
	}
	return fmt.Sprint(out)
}
