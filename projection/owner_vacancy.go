package projection

import (
	"context"
	"slices"
	"sync"
	"time"
)

// This file holds the vacating of leases whose owners are gone (owner.go
// has the lease): a writer whose fence found a lease held tries, after its
// batch, whether any session still holds it.

// ownerVacate is how often a processor tries to vacate a lease it found
// held: a lease its owner left without ending it (killed, or its
// connection for the leases lost) makes every other writer bump its row,
// one at a time, until someone takes it over or vacates it.
const ownerVacate = 10 * time.Second

// vacancies holds the leases a processor's writes found held, to be tried
// (vacate) at most every ownerVacate. It is shared by the processors
// derived from one New.
type vacancies struct {
	mu    sync.Mutex
	tried map[string]time.Time // by gate key: the last try
	due   []string
}

func newVacancies() *vacancies {
	return &vacancies{tried: map[string]time.Time{}}
}

// held notes that a write found key's lease held.
func (vs *vacancies) held(key string) {
	if vs == nil {
		return
	}
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if time.Since(vs.tried[key]) < ownerVacate || slices.Contains(vs.due, key) {
		return
	}
	vs.due = append(vs.due, key)
}

// vacate vacates the leases found held since the last call whose owners
// are gone: no session holds their session lock (Owners.Vacate). The
// owner that is gone can no longer check its token; the next one takes a
// larger one. A failure is logged: the next write that finds the lease
// held tries again.
func (p *Processor) vacate(ctx context.Context) {
	vs := p.vacancies
	if vs == nil || ctx.Err() != nil {
		return
	}
	vs.mu.Lock()
	due := vs.due
	vs.due = nil
	for _, key := range due {
		vs.tried[key] = time.Now()
	}
	vs.mu.Unlock()
	for _, key := range due {
		ok, err := p.store.Owners.Vacate(ctx, p.pool, key, p.ownerKey(key))
		switch {
		case err != nil:
			p.log.WarnContext(ctx, "owner: cannot vacate a lease", "gate_key", key, "error", err)
		case ok:
			p.log.WarnContext(ctx, "owner: vacated a lease its owner left (no session holds it)", "gate_key", key)
		}
	}
}
