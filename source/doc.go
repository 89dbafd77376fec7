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
// batches of up to Config.BatchSize, waiting at most Config.MaxWait for a
// batch to fill, and runs each batch through [projection.Processor.Process]
// in one transaction — never one transaction per event.
//
// A delivery is settled through its [Acker] only after that transaction has
// committed: Ack when it committed, Nack when Process failed. An Acker that
// cannot redeliver (a catch-up subscription) declines the Nack and the worker
// retries the deliveries itself, with capped exponential backoff. The
// Config.BeforeCommit hook runs inside the batch's transaction: a source
// writes its checkpoint there, so the checkpoint and the effects it covers
// commit or roll back together.
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
package source
