package projection

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/buffer"
)

// This file holds the operator views of parked events (inspect.go has the
// others): package buffer lists them from the parked table, and the
// processor adds each aggregate's applied version from the versions table,
// in the same snapshot.

// Parked lists parked events, the longest parked first.
func (p *Processor) Parked(ctx context.Context, opts ListOptions) ([]ParkedEntry, error) {
	if err := p.checkFilter(opts); err != nil {
		return nil, err
	}
	f, err := p.genFilter(ctx, opts)
	if err != nil {
		return nil, err
	}
	var out []ParkedEntry
	err = p.snapshot(ctx, func(tx pgx.Tx) error {
		var es []buffer.Entry
		b := &pgx.Batch{}
		p.buf.QueueList(b, p.bufferFilter(opts, f), func(got []buffer.Entry) { es = got })
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		keys := make([]gateKey, len(es))
		for i, e := range es {
			keys[i] = gateKey{e.Projection, e.Aggregate}
		}
		current, err := p.currentVersions(ctx, tx, keys, f)
		if err != nil {
			return err
		}
		out = make([]ParkedEntry, len(es))
		for i, e := range es {
			name, gen := f.ref(e.Projection)
			out[i] = ParkedEntry{Projection: name, Generation: gen, Aggregate: e.Aggregate, Version: e.Version, EventID: e.StableID(),
				Type: e.Type, Data: Payload(e.Data), Metadata: Payload(e.Metadata), ParkedAt: e.ParkedAt, Current: current[keys[i]]}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("projection: %w", err)
	}
	return out, nil
}

// Waiting lists the aggregates that have parked events, the longest waiting
// first.
func (p *Processor) Waiting(ctx context.Context, opts ListOptions) ([]WaitingEntry, error) {
	if err := p.checkFilter(opts); err != nil {
		return nil, err
	}
	f, err := p.genFilter(ctx, opts)
	if err != nil {
		return nil, err
	}
	var out []WaitingEntry
	err = p.snapshot(ctx, func(tx pgx.Tx) error {
		var ws []buffer.Waiting
		b := &pgx.Batch{}
		p.buf.QueueWaiting(b, p.bufferFilter(opts, f), func(got []buffer.Waiting) { ws = got })
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		keys := make([]gateKey, len(ws))
		for i, w := range ws {
			keys[i] = gateKey{w.Projection, w.Aggregate}
		}
		current, err := p.currentVersions(ctx, tx, keys, f)
		if err != nil {
			return err
		}
		out = make([]WaitingEntry, len(ws))
		for i, w := range ws {
			cur := current[keys[i]]
			name, gen := f.ref(w.Projection)
			out[i] = WaitingEntry{Projection: name, Generation: gen, Aggregate: w.Aggregate, Current: cur, Parked: w.Count,
				MinVersion: w.MinVersion, MaxVersion: w.MaxVersion, MissingFrom: cur + 1, MissingTo: w.MinVersion - 1, Oldest: w.Oldest}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("projection: %w", err)
	}
	return out, nil
}

// gateKey is an aggregate of a projection (its gate key).
type gateKey struct{ projection, aggregate string }

// snapshot runs fn in a read-only repeatable-read transaction: listings
// that read more than one table see them at one point in time.
func (p *Processor) snapshot(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, p.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

// currentVersions returns the applied version of each of keys (absent: 0),
// f naming the generations of their gate keys: an inline projection's is
// the later of its version row's and its row's, as the gate takes it.
func (p *Processor) currentVersions(ctx context.Context, q pgx.Tx, keys []gateKey, f genFilter) (map[gateKey]int64, error) {
	out := make(map[gateKey]int64, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	projs, aggs := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		projs[i], aggs[i] = k.projection, k.aggregate
	}
	rows, err := p.store.Versions.Current(ctx, q, projs, aggs)
	if err != nil {
		return nil, fmt.Errorf("current versions: %w", err)
	}
	var k gateKey
	var v int64
	if _, err := pgx.ForEachRow(rows, []any{&k.projection, &k.aggregate, &v}, func() error {
		out[k] = v
		return nil
	}); err != nil {
		return nil, fmt.Errorf("current versions: %w", err)
	}
	byKey := map[string][]string{}
	for _, k := range keys {
		byKey[k.projection] = append(byKey[k.projection], k.aggregate)
	}
	for key, aggs := range byKey {
		name, gen := f.ref(key)
		t := p.inlineViewOf(ctx, name, gen)
		if t == nil {
			continue
		}
		rows, err := p.store.Versions.InlineVersions(ctx, q, t.ref(), aggs)
		if err != nil {
			return nil, fmt.Errorf("current versions: %w", err)
		}
		k := gateKey{projection: key}
		if _, err := pgx.ForEachRow(rows, []any{&k.aggregate, &v}, func() error {
			out[k] = max(out[k], v)
			return nil
		}); err != nil {
			return nil, fmt.Errorf("current versions: %w", err)
		}
	}
	return out, nil
}

// bufferFilter returns the buffer's filter for opts.
func (p *Processor) bufferFilter(opts ListOptions, f genFilter) buffer.Filter {
	return buffer.Filter{Include: f.include, Exclude: f.exclude, Aggregate: opts.Aggregate, OlderThan: opts.OlderThan,
		Limit: opts.limit(), OmitPayloads: opts.OmitPayloads}
}
