package projection

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// This file holds the ladder of attempt modes and the errors that move a
// batch up it.

// txMode is how one attempt at a batch treats the version rows.
//
// Every mode takes its locks in one global order, so that no two
// transactions of any modes, processes or operator actions can deadlock on
// inorder's rows:
//
//  1. the projections' rebuild locks (shared advisory locks), in projection
//     name order;
//  2. the version rows, per projection in name order, each projection's
//     rows in aggregate byte order — written (speculation, compare-and-set)
//     or locked (locked and careful modes) by one statement per projection,
//     which the unnest arrays feed in that order;
//  3. the rows of inline projections (Inline), per projection in name
//     order, each in aggregate order: locked by the general path (one
//     statement, after every version row), written by the handler's upsert
//     on the fast path — a mixed attempt locks its fast aggregates' rows
//     with the others', in the same pass, before its handler writes them,
//     and a speculative attempt locks them before the first handler runs
//     when an inline projection is not the first (queuePrelock). A
//     processor with an inline projection locks every projection's version
//     rows in step 2 on the general path, so that no compare-and-set of a
//     version row comes after these;
//  4. per projection in name order: the projection's own writes (its
//     handler), then the gate's rows of the aggregates whose version rows
//     the transaction holds (parked, applied, quarantine: no transaction
//     touches them without holding the version row first), then the
//     projection's conflicts (one statement, sorted);
//  5. the rejected deliveries (one statement, sorted by fingerprint), the
//     source's checkpoint and Batch.BeforeCommit.
//
// An operator action locks one version row first (step 2) and then the
// rest, as a batch does. A projection's handler must keep its own writes to
// rows that several aggregates share in a fixed order (the ledger upserts
// its balances sorted by account); careful mode calls the handler one
// aggregate at a time, which an order across aggregates cannot survive, but
// careful mode is the rare path of failing handlers.
type txMode struct {
	// careful locks, writes and applies aggregate by aggregate under
	// savepoints: a handler error quarantines the failing event, a write
	// the database refuses sets the aggregate's deliveries aside as
	// rejected (UnstorableError), and the rest of the batch commits.
	careful bool
	// locked creates and locks the version rows up front instead of
	// reading them optimistically.
	locked bool
	// speculative writes the version rows as if every run of the batch
	// (batch.runs) continued its aggregate, without reading them, under a
	// savepoint; if one does not, the attempt rolls back to the savepoint
	// and reads them.
	speculative bool
	// mixed, for inline projections, reads their rows and version rows
	// first (without locks) and takes the fast path for the aggregates whose
	// runs continue their rows with nothing parked or quarantined, the
	// general path for the others, in one transaction (inline_gate.go).
	//
	// Not for a while after a mixed attempt missed (Processor.noMixed):
	// when other transactions keep moving the same aggregates — competing
	// consumers, to whom a subscription deals each aggregate's versions in
	// turn — a mixed attempt finds an aggregate moved, parked or created
	// under it in most batches and redoes the whole batch on the general
	// path; general attempts do less work there, and park fewer of each
	// other's events (BenchmarkESDB persistent-2: 1.7–2.7k of 50k against
	// 8.7–11.7k).
	mixed bool
}

// String names the mode for traces: careful, locked, speculative, mixed or
// optimistic.
func (m txMode) String() string {
	switch {
	case m.careful:
		return "careful"
	case m.locked:
		return "locked"
	case m.speculative && m.mixed:
		return "speculative+mixed"
	case m.speculative:
		return "speculative"
	case m.mixed:
		return "mixed"
	}
	return "optimistic"
}

// mode returns the mode of the next attempt at bt.
func (p *Processor) mode(bt *batch, handlerFailures int, contended, refused bool) txMode {
	careful := refused || handlerFailures >= p.cfg.MaxAttempts-1
	locked := careful || contended || p.lockFirst.Load() > 0
	m := txMode{
		careful:     careful,
		locked:      locked,
		speculative: !locked && bt.runs != nil && !p.noSpeculation.Load(),
	}
	m.mixed = !careful && !m.speculative && p.noMixed.Load() == 0 && p.hasInline()
	return m
}

// txResult is what a committed attempt reports.
type txResult struct {
	tally []counts // per projection
	// continues is true when every aggregate of the batch was, in every
	// projection, at the version before its run, with nothing parked or
	// quarantined: a batch that speculation would have got right.
	continues bool
	// misspeculated is true when the attempt speculated and had to read.
	misspeculated bool
	// fastPath is true when the attempt took aggregates by a fast path
	// (speculation, or a mixed attempt's fast aggregates).
	fastPath bool
	// rows is what the attempt did to its inline rows (rowUpdates; nil in
	// careful mode).
	rows rowNews
	// states is what the attempt tells the processor's memory of its
	// version rows (stateNews).
	states stateNews
}

// errContended reports that a version row changed between the optimistic
// read and the compare-and-set.
var errContended = errors.New("projection: version row changed concurrently")

// handlerFailure marks an error of a projection's handler (or of the
// pipeline that carried its statements), as opposed to the gate's own.
type handlerFailure struct {
	projection string
	err        error
}

func (h *handlerFailure) Error() string {
	return fmt.Sprintf("projection %s: handler: %v", h.projection, h.err)
}
func (h *handlerFailure) Unwrap() error { return h.err }

// isRefusal reports whether err is the database refusing a statement for a
// reason of the data it was given (a value it cannot store, a key too long
// for an index), as opposed to a transient failure or a bug: careful mode
// then sets the deliveries that cause it aside.
func isRefusal(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || IsTransient(err) {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", // data exception: invalid byte sequence, value too long, …
		"54": // program limit exceeded: index row size, …
		return true
	}
	return false
}
