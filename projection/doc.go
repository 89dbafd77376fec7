// Package projection is inorder's processor: it turns batches of deliveries —
// in any order, duplicated, from any number of goroutines and processes —
// into exactly-once, in-order effects on PostgreSQL read models.
//
// # Projections
//
// A projection implements [Projection] plus one of two handler APIs:
//
//   - [EventHandler]: Apply(ctx, tx, event), called once per event to apply.
//     Statements queued with [Tx.Queue] are pipelined: the processor sends
//     those of every event of a transaction in one round trip.
//   - [BatchHandler]: ApplyBatch(ctx, tx, events), called once per
//     transaction with every event to apply — already gated, deduplicated
//     and ordered per aggregate by version — for set-based writes (unnest,
//     COPY).
//
// Beyond its handler, a projection implements only what it needs, from
// four optional interfaces:
//
//	interface      what it is for                      when to implement it
//	-------------  ----------------------------------  ------------------------------------
//	EventHandler   the handler: one call per event     always, this or BatchHandler; the
//	                                                   simplest choice
//	BatchHandler   the handler: one call per           instead of EventHandler, for hot
//	               transaction with all its events     projections written with set-based
//	                                                   SQL (unnest, COPY)
//	Tables         Setup creates the read model's      when the projection owns tables (to
//	               tables, Reset empties them          set up, and to rebuild in place)
//	Describer      Describe returns a Description:     when a default does not fit: the
//	               event types handled, code version,  types are known (others rejected),
//	               gap handling, verification          the code changed (rebuild side by
//	                                                   side), the read model must take
//	                                                   versions declared missing, or a new
//	                                                   generation must be checked
//	Reader         Get and List serve the read model   to serve it over HTTP (package
//	                                                   httpapi, Processor.ReadAggregate)
//	Inline         the read model's one row per        one row per aggregate, written by
//	               aggregate carries the gate's state  every event: the fast path (see The
//	                                                   gate, and docs/guarantees.md)
//
// A [Description]'s zero value is every default: all event types
// accepted, code version 1, no gap handling, no verification.
//
// # Setup
//
// [Processor.Setup] is the one call a program makes before Process, in
// every process at start-up: it applies inorder's pending migrations to
// [Config].Schema (package migrations; the schema is created if missing),
// then runs every [Tables]' Setup. Concurrent calls are serialised, and a
// call on a migrated schema only checks it. A pending offline migration is
// refused while other inorder workers of the schema are connected (an
// error wrapping migrations.ErrWorkersConnected, nothing applied). A dry
// run, or forcing an offline migration, is for package migrations or the
// inorder migrate command, before Setup.
//
// # The gate
//
// For each (projection, aggregate) the processor keeps the last applied
// version in the versions table. [Processor.Process] runs a batch in one
// transaction:
//
//  1. validate every envelope; record invalid ones in the rejected table;
//  2. read the version rows of every (projection, aggregate) of the batch;
//  3. classify each event: version current+1 and the contiguous run after it
//     (from the batch and from the parked table) is applied; a later version
//     is parked; an earlier one is a duplicate, or a conflict when its id or
//     payload differ from the applied event's (recorded in the conflicts
//     table);
//  4. write the new version rows with a compare-and-set on their revision,
//     in one deterministic order, with the applied log entries (event id and
//     payload hash) of the versions the run applies — if another transaction
//     changed one since step 2, the batch starts again with the rows locked
//     up front (and keeps locking up front for a while, since writers are
//     competing);
//  5. call the handler with the run, park, delete drained parked events;
//  6. write the batch's checkpoints (a source's position), run its
//     BeforeCommit hook, and commit.
//
// A batch whose versions form one contiguous run per aggregate (what an
// in-order stream delivers) skips step 2 while the previous batches were in
// order: under a savepoint, it writes every version row from the version
// before its run to the run's last one, where the row is at that version with
// nothing parked or quarantined (a new aggregate's row is created). If one
// row does not match, it rolls back to the savepoint and goes through steps
// 2–4; later batches read first until one is found in order again.
//
// The applied log of an aggregate's recent versions lives in its version
// row, in pages of 16 entries; a write that starts a new page moves the old
// page's entries to the applied table. The applied_log view shows both, one
// row per applied version.
//
// Every change to an aggregate's gate state goes through its version row, so
// two transactions can never both apply, park or drain the same version: the
// second one's compare-and-set fails, or it waits for the first one's lock.
//
// An [Inline] projection — one row per aggregate, written by every applied
// event — carries the gate's state in that row instead: on the fast path its
// own upsert is the compare-and-set ([InlineTable.Condition]) and keeps the
// applied log of the row's last [InlineTable].LogEntries versions (default
// [InlineLogEntries], 16; [InlineTable.SetLog]), and the gate writes no row
// of its own. [InlineUpsert] writes that upsert for the projection from
// what its rows are — its columns, and what each becomes when the row
// exists — and adds the condition and the log. That is an inline projection's conflict horizon: a stale
// redelivery older than it counts as a duplicate without being checked
// against the applied event, and as [Counts].BeyondHorizon; a projection
// with version rows keeps every version's entry and has no horizon. Once the
// upsert holds the rows, the gate checks that no version row has parked or
// quarantined events or a later version; an aggregate that leaves the fast
// path goes through the steps above, in the same transaction. Batches after
// one that left it read the rows first and split their aggregates between
// the two paths. docs/guarantees.md states the checks and the projection's
// obligations. A processor with [Config].Owner holds a fenced lease on its
// inline projections' gate keys and skips the empty version row the fast
// path otherwise inserts for each new aggregate (docs/owner.md); call
// [Processor.Close] when done.
//
// Only then does Process return each delivery's [Outcome], so a source
// acknowledges after the commit and never before. Any delivery order, any
// duplication and any number of concurrent workers give the read model of the
// stream applied in order, once.
//
// # Shared rows
//
// Rows that the events of many aggregates update — counters, stock,
// balances — are written by batches of several workers at once. Batches
// that lock them in different orders deadlock: PostgreSQL aborts one after
// deadlock_timeout (1 s by default) and the processor retries it, counting
// it in [Counts].Deadlocks and logging the table and the statement. [Sums]
// accumulates a batch's additive changes per key and writes them with one
// upsert in key order, which cannot deadlock:
//
//	sums := projection.NewSums[string](pgx.Identifier{"balances"}, "account", "balance")
//	for _, e := range events {
//		sums.Add(account(e), amount(e))
//	}
//	sums.Queue(tx)
//
// # Handlers without a Processor
//
// [Apply] runs a projection's handler on a pgx.Tx of the caller's, without
// the gate: to test a handler, or to reuse it in a hand-written consumer.
//
// # Failures
//
// Transient database errors (serialization failures, deadlocks — see
// "Shared rows" —, lost connections; see [IsTransient]) retry the transaction with backoff. A
// handler error is retried; if it persists ([Config].MaxAttempts), the batch
// is applied aggregate by aggregate under savepoints, and the failing event is
// quarantined: the rest of the batch commits, the aggregate's later versions
// park behind it, and every other aggregate keeps flowing. Operators then call
// [Processor.RetryQuarantined], [Processor.SkipQuarantined] or
// [Processor.DeclareGap] (for versions that will never arrive), and
// [Processor.ReplayRejected] for rejected envelopes. Every decision is written
// to the operator log. [Processor.Status], [Processor.Quarantined],
// [Processor.Conflicts], [Processor.Rejected] and the parked-table views of
// package buffer show what needs attention.
//
// # Generations
//
// A generation is a projection's read model as one version of its code
// builds it ([Description].Version; version 1 by default): its own read-model tables
// and its own gate state. Generation 1 is what a projection has before any
// side-by-side rebuild: its tables in the connection's search_path, its gate
// rows under the projection's name. Generation n > 1 has a schema of its own
// ("<inorder schema>_<name>_g<n>") and its gate rows under the key
// "<name>@<n>". The generations table (migration 005) records them; exactly
// one per projection is live, and [Processor.ReadAggregate],
// [Processor.ReadList], [Processor.Version], [Processor.Status], the
// listings and the operator actions use it — a read chooses it in the same
// snapshot as the rows it reads, so it never mixes two generations.
//
// The gate reaches a generation's tables without rewriting the projection's
// SQL: while a handler runs, the generation's schema is first on the
// transaction's search_path (set and restored around each projection's
// handler, so a batch feeding several projections gives each its own). A
// projection that names its tables' schema cannot be rebuilt side by side.
//
// A processor feeds every generation that is live, in catch-up or previous
// (see the states' constants) and whose code version is its projection's,
// in the same transaction — each with its own gate rows, in the global lock
// order by gate key. Result.Projections reports the live generation (else
// the one in catch-up, else the previous one); a projection of which the
// processor feeds no generation reports the zero Outcome. Which generations
// are fed is cached per generation epoch, a counter every change of them
// moves on (a rebuild in place moves it too); every batch transaction reads
// the epoch first, right after its rebuild locks, and starts again with
// fresh generations when it moved.
//
// [Processor.Build] rebuilds a projection side by side: it replays the
// stream into a new generation in bulk (one writer, no version rows, large
// batches, commits that do not wait for the disk, a resumable position), lets the processors of
// its code version feed it (catch-up), reads the stream to its end through
// the gate, verifies it ([Description].Verify, and the live generation's content when
// the code did not change) and switches it in with one transaction; the
// old generation stays fed for [Processor.Rollback] until its retention
// ends. [Processor.DropGeneration] drops one that is not live.
//
// Why the catch-up misses nothing: a batch transaction whose epoch check
// saw the epoch before the generation entered catch-up received its events
// before that change committed; the rebuild reads the stream's end only
// after it committed, so it applies them itself. Every transaction that
// checks later feeds the new generation. The gate makes the double
// deliveries harmless.
//
// # Rebuild in place
//
// [Processor.Build] with [BuildOptions].InPlace empties a projection's live
// generation — read model and gate state — and replays the stream
// ([BuildOptions].Replay, a [Replay]) from the start through the same
// gate. Live workers of that projection pause meanwhile: every transaction
// takes the projection's shared advisory lock, and the rebuild holds the
// exclusive one. A rebuild that dies half-way is simply run again.
package projection
