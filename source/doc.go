// Package source holds what every source of deliveries — an event store
// subscription, a broker consumer — needs to feed a [projection.Processor]
// efficiently and safely.
//
// # Dispatcher
//
// A [Dispatcher] takes deliveries one at a time ([Dispatcher.Dispatch]) and
// hands them to Config.Workers goroutines by a hash of their aggregate id, so
// every delivery of one aggregate goes to the same worker of the process and
// is processed in arrival order. Each worker groups its deliveries into
// batches of up to Config.BatchSize and runs each batch through
// [projection.Processor.Process] in one transaction — never one transaction
// per event.
//
// # Keeping batches full
//
// Config.MaxInFlight is the window: how many deliveries may be dispatched
// and not yet settled, over all workers (Dispatch blocks while it is full).
// For full batches it must hold, for every worker, the batch in its
// transaction and the next one filling behind it; the default,
// [DefaultWindowBatches] × Workers × BatchSize (3 × 4 × 500 = 6,000), adds a
// batch of headroom for partitions of uneven size. A source whose server
// enforces a window of its own (a persistent subscription's buffer size)
// uses the same default there and sets MaxInFlight to it.
//
// A worker closes its batch when it is full; when the window is full —
// nothing more can arrive until some batch commits, so waiting would only
// leave workers idle while the server holds events back; when Config.MaxWait
// has passed since its first delivery (a trickle of live events); or at a
// Flush. [Dispatcher.Stats] shows the effect: batches by close reason and
// by fill, the window in use, and the time workers waited for input — idle
// with nothing to process, or holding a partial batch.
//
// A delivery is settled through its [Acker] only after that transaction has
// committed: Ack when it committed, Nack when Process failed. An Acker that
// cannot redeliver (a catch-up subscription) declines the Nack and the worker
// retries the deliveries itself, with capped exponential backoff (the policy
// of package internal/retry). Before each batch, the dispatcher asks the
// source for the positions the batch takes it to (Config.Checkpoints): they
// are written in the batch's transaction (projection.Batch.Checkpoints), so
// the checkpoint and the effects it covers commit or roll back together.
// Config.BeforeCommit runs other statements of a source in that transaction.
//
// [Dispatcher.Flush] processes everything dispatched so far without waiting
// for MaxWait and returns once it is settled: a graceful stop is "stop
// receiving, Flush, then cancel the context given to [Dispatcher.Run]".
// Cancelling that context abandons unsettled deliveries: their transactions
// roll back and they are neither acknowledged nor nacked, so the source
// delivers them again.
//
// # Tracker
//
// With several workers, batches commit out of order, so a source reading a
// totally ordered log (EventStoreDB's $all, a Kafka partition, an outbox
// table) cannot checkpoint the position of the batch that just committed. A
// [Tracker] keeps the positions in flight in arrival order and answers the
// low watermark: the highest position P such that every delivery at or before
// P is committed. [Tracker.WatermarkWith] answers it as if a batch's own
// deliveries were committed, which is what that batch's transaction may
// store; [Tracker.Pass] records positions that need no work (skipped events,
// a server's checkpoints) so the watermark moves past them.
//
// # Every source alike
//
// A source that runs in a worker process is a [Feed]: Run, Abort, its
// [Lag] in events and seconds, and its metrics. The conformance suite of
// package source/sourcetest checks every source through it.
// [NewCollector] exports the figures every source shares — the
// dispatcher's window and batches, inorder_source_lag_events and
// inorder_source_lag_seconds — under the same names and labels. (The
// sources of this module with help texts and values of their own, esdb and
// nats, build the same rows through an internal package.)
package source
