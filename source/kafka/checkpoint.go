package kafka

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// This file holds the partitions' checkpoints: one row per partition in the
// processor's checkpoints table, "<Name>/<topic>/<partition>", holding the
// offset of the last record at or before which every record of the
// partition is committed. A batch writes the rows of the partitions it
// touches in its own transaction (source.Config.Checkpoints).

// checkpointName is the checkpoint row of a partition.
func checkpointName(name string, p Partition) string {
	return name + "/" + p.Topic + "/" + strconv.FormatInt(int64(p.Partition), 10)
}

// parseCheckpointName is the inverse of checkpointName, for rows of name.
func parseCheckpointName(name, row string) (Partition, bool) {
	rest, ok := strings.CutPrefix(row, name+"/")
	if !ok {
		return Partition{}, false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		return Partition{}, false
	}
	n, err := strconv.ParseInt(rest[i+1:], 10, 32)
	if err != nil || n < 0 {
		return Partition{}, false
	}
	return Partition{Topic: rest[:i], Partition: int32(n)}, true
}

// encodeOffset encodes an offset zero-padded to 20 digits, so that byte
// order is offset order (the checkpoints table never moves a row back).
func encodeOffset(off int64) projection.Position {
	return projection.Position(fmt.Sprintf("%020d", off))
}

func decodeOffset(b projection.Position) (int64, error) {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || len(b) != 20 || n < 0 {
		return 0, fmt.Errorf("not a Kafka offset: %q", b)
	}
	return n, nil
}

// storedOffsets returns the committed checkpoint of every partition of the
// source's topics that has one.
func storedOffsets(ctx context.Context, proc *projection.Processor, name string) (map[Partition]int64, error) {
	cps, err := proc.Checkpoints(ctx)
	if err != nil {
		return nil, fmt.Errorf("kafka: load checkpoints: %w", err)
	}
	out := map[Partition]int64{}
	for _, cp := range cps {
		p, ok := parseCheckpointName(name, cp.Name)
		if !ok {
			continue
		}
		off, err := decodeOffset(cp.Position)
		if err != nil {
			return nil, fmt.Errorf("kafka: checkpoint %s: %w", cp.Name, err)
		}
		out[p] = off
	}
	return out, nil
}

// checkpoints returns, for each partition a batch touches, its low
// watermark with the batch's records counted as committed: what the batch's
// transaction stores.
func (s *Source) checkpoints(batch []*source.Delivery) []projection.Checkpoint {
	var parts []*partition
	var tickets [][]source.Ticket
	for _, d := range batch {
		p := d.Handle.(*partition)
		i := 0
		for i < len(parts) && parts[i] != p {
			i++
		}
		if i == len(parts) {
			parts = append(parts, p)
			tickets = append(tickets, nil)
		}
		tickets[i] = append(tickets[i], d.Ticket)
	}
	cps := make([]projection.Checkpoint, 0, len(parts))
	offsets := make(map[*partition]int64, len(parts))
	for i, p := range parts {
		w, ok := p.tracker.WatermarkWith(tickets[i])
		if !ok || w.off <= p.saved.Load() {
			continue
		}
		cps = append(cps, projection.Checkpoint{Name: p.cpName, Position: encodeOffset(w.off)})
		offsets[p] = w.off
	}
	s.cpMu.Lock()
	s.batchCP[batch[0]] = offsets
	s.cpMu.Unlock()
	return cps
}

// saveWatermarks saves, on their own, the watermarks of parts that moved
// past what batches stored: tombstones passed after a partition's last
// batch.
func (s *Source) saveWatermarks(ctx context.Context, parts []*partition) error {
	for _, p := range parts {
		w, ok := p.tracker.Watermark()
		if !ok || w.off <= p.saved.Load() {
			continue
		}
		if err := s.cfg.Processor.SaveCheckpoint(ctx, p.cpName, encodeOffset(w.off)); err != nil {
			return fmt.Errorf("kafka: %w", err)
		}
		p.advance(w.off)
	}
	return nil
}
