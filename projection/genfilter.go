package projection

import (
	"context"
	"fmt"

	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the generation filter of the operator listings
// (ListOptions.Generation, ListOptions.AllGenerations): which gate keys a
// listing shows, and the projection and generation of each key, which the
// listings report instead of the key.

// genRef is a projection's generation, as listings report a gate key.
type genRef struct {
	name       string
	generation int
}

// genFilter is the generation filter of one listing.
type genFilter struct {
	// include lists the gate keys listed (empty: every key but exclude).
	include []string
	// exclude lists the gate keys left out.
	exclude []string
	// refs maps the keys of the schema's generations to their projection
	// and generation.
	refs map[string]genRef
	// names are the processor's projections.
	names map[string]*registered
}

// ref returns the projection and generation of a gate key.
func (f genFilter) ref(key string) (string, int) {
	if r, ok := f.refs[key]; ok {
		return r.name, r.generation
	}
	for name := range f.names {
		if n := keyGeneration(name, key); n > 0 {
			return name, n
		}
	}
	return key, 1 // a projection that never recorded a generation: its first
}

// genFilter returns the generation filter of opts: by default the live
// generation of every projection (the projection's own, when one is named),
// Generation n the n-th, AllGenerations every one.
func (p *Processor) genFilter(ctx context.Context, opts ListOptions) (genFilter, error) {
	f := genFilter{include: []string{}, exclude: []string{}, refs: map[string]genRef{}, names: p.byName}
	if opts.Generation < 0 {
		return f, fmt.Errorf("projection: %w: generation %d", ErrNoGeneration, opts.Generation)
	}
	if opts.Generation > 0 && opts.AllGenerations {
		return f, fmt.Errorf("projection: a listing takes a generation or all of them, not both")
	}
	refs, err := p.store.Generations.Refs(ctx, p.pool)
	if err != nil {
		return f, fmt.Errorf("projection: generations: %w", err)
	}
	live := map[string]string{} // projection → its live key
	var notLive []string
	for _, r := range refs {
		f.refs[r.Key] = genRef{name: r.Projection, generation: r.Generation}
		if r.State == StateLive {
			live[r.Projection] = r.Key
		} else {
			notLive = append(notLive, r.Key)
		}
	}
	switch {
	case opts.Projection == "" && opts.AllGenerations:
	case opts.Projection == "" && opts.Generation > 0:
		for name := range p.byName {
			f.include = append(f.include, generationKey(name, opts.Generation))
		}
	case opts.Projection == "":
		f.exclude = notLive
	case opts.AllGenerations:
		f.include = append(f.include, opts.Projection)
		for k, r := range f.refs {
			if r.name == opts.Projection && k != opts.Projection {
				f.include = append(f.include, k)
			}
		}
	case opts.Generation > 0:
		f.include = append(f.include, generationKey(opts.Projection, opts.Generation))
	default:
		k, ok := live[opts.Projection]
		if !ok {
			k = opts.Projection
		}
		f.include = append(f.include, k)
	}
	f.exclude = nonNil(f.exclude) // an SQL NULL would exclude every row
	return f, nil
}

// keys returns f's gate keys for a listing's statement.
func (f genFilter) keys() store.Keys { return store.Keys{Include: f.include, Exclude: f.exclude} }
