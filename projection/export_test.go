package projection

import (
	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
)

// NewTx wraps a pgx transaction in the handler-facing *Tx, so tests outside
// the package can call a handler directly, without the gate (the set-based
// baseline of BenchmarkLedger does). Call Flush to send what it queued.
func NewTx(tx pgx.Tx) *Tx { return newTx(tx, "") }

// TxBatch is t's pipeline, for benchmarks that queue inorder's own
// statements (package buffer) beside a handler's.
func TxBatch(t *Tx) *pgx.Batch { return t.batch }

// Speculation returns how many attempts p made that wrote their version
// rows without reading them, and how many tried and had to read them.
func Speculation(p *Processor) (speculated, misspeculated int64) {
	return p.speculated.Load(), p.misspeculated.Load()
}

// RowsCounted returns how many inline rows p's speculation counted instead
// of taking them as written by its own commits.
func RowsCounted(p *Processor) int64 { return p.rowsCounted.Load() }

// RowsLocked returns how many inline rows p's attempts locked before their
// handlers ran.
func RowsLocked(p *Processor) int64 { return p.rowsLocked.Load() }

// SetInlineRuns gives t the inline runs of events (sorted by aggregate and
// version) as the gate does for an inline BatchHandler, so that a benchmark
// can call an inline handler without the gate (BenchmarkLedger's
// setbased+inline bound). Flush checks nothing of what the upserts wrote.
func SetInlineRuns(t *Tx, events []aggregate.Event) {
	runs := inlineRuns(events, nil, true)
	t.inline = &inlineTx{runs: runs, event: -1, want: int64(len(runs))}
}

// Finish queues on t what its handler's calls left for the end of the
// transaction (the Sums of TxSums), as the processor does after a
// handler's last call.
func Finish(t *Tx) { t.finish() }

// GenProcessor returns the processor a rebuild replays generation 1 of
// projection through (see Processor.genProcessor): a side-by-side rebuild's
// first generation, and the live generation an in-place rebuild empties and
// replays.
func GenProcessor(p *Processor, projection string) *Processor {
	r := p.byName[projection]
	return p.genProcessor(r, r.key, r.schema)
}

// Memory returns how many version rows p's attempts took from its memory
// instead of reading them, how many times a check found that memory stale,
// and how many aggregates it remembers.
func Memory(p *Processor) (hits, misses int64, remembered int) {
	return p.memoryHits.Load(), p.memoryMisses.Load(), p.states.len()
}

// ParkedRemembered returns how many times an attempt of p took an
// aggregate's parked events from its memory instead of the database.
func ParkedRemembered(p *Processor) int64 { return p.parkedRemembered.Load() }

// Owns reports whether p holds the lease of projection's gate key
// (Config.Owner).
func Owns(p *Processor, projection string) bool {
	if p.owner == nil {
		return false
	}
	p.owner.mu.Lock()
	defer p.owner.mu.Unlock()
	_, ok := p.owner.leases[p.byName[projection].key]
	return ok
}

// FenceKey returns the advisory lock key of gate key key's fence (owner.go),
// which every writer that is not key's owner takes shared.
func FenceKey(p *Processor, key string) int64 { return p.fenceKey(key) }

// OwnerKey returns the advisory lock key of gate key key's lease, which
// its owner holds on a connection of its own.
func OwnerKey(p *Processor, key string) int64 { return p.ownerKey(key) }
