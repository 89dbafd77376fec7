package projection

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// This file holds the checkpoints table: where sources store their position
// in the same transaction as the work it covers (Batch.Checkpoint and
// Batch.Checkpoints), or on their own (SaveCheckpoint) when they pass events
// no projection needs.

// SaveCheckpoint stores a source's position under name, unless the stored
// one is already at or after it (positions compare as byte strings: see
// Position).
func (p *Processor) SaveCheckpoint(ctx context.Context, name string, position Position) error {
	if name == "" || len(position) == 0 {
		return errors.New("projection: save checkpoint: empty name or position")
	}
	if err := p.store.Checkpoints.Save(ctx, p.pool, name, position); err != nil {
		return fmt.Errorf("projection: save checkpoint %s: %w", name, err)
	}
	return nil
}

// LoadCheckpoint returns the position stored under name; ok is false when
// there is none.
func (p *Processor) LoadCheckpoint(ctx context.Context, name string) (position Position, ok bool, err error) {
	position, ok, err = p.store.Checkpoints.Load(ctx, p.pool, name)
	if err != nil {
		return nil, false, fmt.Errorf("projection: load checkpoint %s: %w", name, err)
	}
	return position, ok, nil
}

// queueCheckpoints queues the writes of a batch's checkpoints (see
// Batch.Checkpoints), in order of name.
func (p *Processor) queueCheckpoints(b *pgx.Batch, one *Checkpoint, more []Checkpoint) error {
	if one == nil && len(more) == 0 {
		return nil
	}
	cps := more
	if one != nil {
		cps = append([]Checkpoint{*one}, more...)
	} else if !slices.IsSortedFunc(cps, compareCheckpoints) {
		cps = slices.Clone(cps)
	}
	slices.SortStableFunc(cps, compareCheckpoints)
	for _, cp := range cps {
		if cp.Name == "" || len(cp.Position) == 0 {
			return errors.New("projection: batch checkpoint with an empty name or position")
		}
		p.store.Checkpoints.QueueSave(b, cp.Name, cp.Position)
	}
	return nil
}

func compareCheckpoints(a, b Checkpoint) int { return strings.Compare(a.Name, b.Name) }
