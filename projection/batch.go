package projection

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
)

// This file holds the batch: what Process is handed (Batch), what it reports
// of each (BatchInfo), its deliveries, and the batch prepared for its
// attempts: validated, sorted, cut into runs, with the rejections to record.

// Batch is one transaction's worth of deliveries.
type Batch struct {
	// Events are the deliveries, in any order, duplicates allowed.
	Events []aggregate.Event

	// Source names where the events came from; it is recorded with rejected
	// events.
	Source string

	// Rejects are deliveries the source already found invalid (content that
	// is not JSON, say), each with its error. They are recorded in the
	// rejected table in the batch's transaction, like invalid Events.
	Rejects []Reject

	// Checkpoint, if set, is the source position this batch takes its
	// source to: it is stored (see Processor.SaveCheckpoint) in the batch's
	// transaction, so the checkpoint and the work it covers commit or roll
	// back together. Name and Position are used.
	Checkpoint *Checkpoint

	// Checkpoints are more positions stored like Checkpoint, for a source
	// whose position has several parts — a Kafka partition each. All of
	// them, with Checkpoint, are written in order of Name, so that batches
	// committing at once lock the rows in the same order and never
	// deadlock.
	Checkpoints []Checkpoint

	// BeforeCommit, if set, runs in the batch's transaction after the
	// projections' writes and the checkpoint, before the commit. It may run
	// more than once if the transaction is retried.
	BeforeCommit func(ctx context.Context, tx pgx.Tx) error

	// Exclusive declares that no other batch holds the batch's aggregates
	// while it runs: the source and its dispatcher deliver them to this
	// worker only (a Kafka partition keyed by aggregate, a leased partition,
	// the only consumer of a subscription; source.Config.Exclusive). The
	// gate never trusts it for correctness — every write still checks the
	// state it assumes — but it takes fewer locks: a mixed attempt of an
	// inline projection leaves the rows of the aggregates it takes by the
	// fast path to the handler's upsert instead of locking them first, in
	// aggregate order, with the others. A wrong declaration (two consumers
	// briefly holding one partition in a rebalance, an operator's action
	// meanwhile) costs at worst a deadlock, which the processor counts
	// (Counts.Deadlocks) and logs with the batch's mark, and retries
	// without the mark; never a wrong read model.
	Exclusive bool

	// DryRun rolls the batch's transaction back instead of committing it:
	// the results say what the batch would have done, and nothing changed
	// (an operator's dry run: ActionOptions.DryRun). Its deliveries must not
	// be acknowledged. Config.OnBatch and the processor's counts do not see
	// it.
	DryRun bool
}

// Reject is a delivery a source could not turn into a valid event. Err
// should be an *aggregate.ValidationError, so its reason code is kept.
type Reject struct {
	Event aggregate.Event
	Err   error
}

// BatchInfo describes one Process call, for Config.OnBatch.
type BatchInfo struct {
	// Source is the batch's Batch.Source ("rebuild:<projection>" for the
	// batches of a rebuild).
	Source string
	// Projections names the projections the batch went through.
	Projections []string
	// Events is len(Batch.Events).
	Events int
	// Exclusive is Batch.Exclusive.
	Exclusive bool
	// Outcomes counts the deliveries by Result.Outcome (empty when the batch
	// failed).
	Outcomes map[Outcome]int
	// Duration is the wall time of the call, retries and backoff included.
	Duration time.Duration
	// Attempts counts the transactions tried (1 when the first committed).
	Attempts int
	// Err is the error Process returned; nil when the batch committed.
	Err error
}

// delivery is one valid event of a batch.
type delivery struct {
	idx  int // position in the batch
	ev   aggregate.Event
	id   string
	hash []byte
}

// batch is a batch prepared for its attempts: validated, sorted, with the
// rejections to record.
type batch struct {
	Batch
	// valid holds the valid deliveries sorted by aggregate (byte order, as
	// PostgreSQL's COLLATE "C"), version and batch position: a deterministic
	// lock order, and contiguous runs.
	valid    []delivery
	aggs     []string // the distinct aggregates of valid, in order
	runs     []run    // contiguousRuns(valid)
	rejected []rejection
	results  []Result
	attempts int
	// epoch is the generation epoch the batch's registrations were chosen
	// in; its transactions check it first (0: no check). See generations.go.
	epoch int64
}

// reject marks delivery i rejected in every projection, with err.
func (bt *batch) reject(i int, err error) {
	bt.results[i].Err = err
	for k := range bt.results[i].Projections {
		bt.results[i].Projections[k] = Rejected
	}
}

// summarize sets each result's Outcome from its projections' outcomes.
func (bt *batch) summarize() {
	for i := range bt.results {
		o := Outcome(0)
		for _, po := range bt.results[i].Projections {
			if po.severity() > o.severity() {
				o = po
			}
		}
		bt.results[i].Outcome = o
	}
}

func distinctAggregates(valid []delivery) []string {
	var aggs []string
	if len(valid) > 0 {
		aggs = make([]string, 0, len(valid))
	}
	for i, d := range valid {
		if i == 0 || d.ev.Aggregate != valid[i-1].ev.Aggregate {
			aggs = append(aggs, d.ev.Aggregate)
		}
	}
	return aggs
}

// run is the versions of one aggregate in a batch: first to last, every one
// in between present; valid[lo:hi] are its deliveries.
type run struct {
	agg         string
	first, last int64
	lo, hi      int
}

// contiguousRuns returns the batch's runs, one per aggregate (of aggs), or
// nil if an aggregate's versions in the batch have a gap. valid is sorted
// by aggregate and version.
func contiguousRuns(valid []delivery, aggs int) []run {
	if len(valid) == 0 {
		return nil
	}
	runs := make([]run, 0, aggs)
	for i, d := range valid {
		switch {
		case i == 0 || d.ev.Aggregate != valid[i-1].ev.Aggregate:
			runs = append(runs, run{agg: d.ev.Aggregate, first: d.ev.Version, last: d.ev.Version, lo: i})
		case d.ev.Version == runs[len(runs)-1].last+1:
			runs[len(runs)-1].last = d.ev.Version
		case d.ev.Version != runs[len(runs)-1].last:
			return nil
		}
		runs[len(runs)-1].hi = i + 1
	}
	return runs
}

// continues reports whether every run starts right after its aggregate's
// version in every projection, with nothing parked or quarantined.
func continues(runs []run, states []map[string]aggState) bool {
	for _, st := range states {
		for _, ru := range runs {
			s, ok := st[ru.agg]
			if ok && (s.version != ru.first-1 || s.parked != 0 || s.blocked) || !ok && ru.first != 1 {
				return false
			}
		}
	}
	return true
}
