// Package pgtable feeds a [projection.Processor] from an events table in
// PostgreSQL: inorder's own (migration 008, written with [Writer.Append]),
// or a table of the application's — an outbox, another event store's —
// whose columns [Table] maps.
//
// # Never skipping a committed row
//
// A position taken from a sequence is handed out at insert and becomes
// visible at commit, so a reader of "seq > last" skips for ever a row whose
// transaction took a low seq and committed after later ones: a permanent,
// silent hole, at zero apparent lag. The source reads instead by
// transaction: every row carries the id of the transaction that inserted it
// (an xid8 column, DEFAULT pg_current_xact_id()), and a read
//
//	SELECT … WHERE (txid, seq) > ($last_txid, $last_seq)
//	  AND txid < pg_snapshot_xmin(pg_current_snapshot())
//	ORDER BY txid, seq
//
// returns only rows of transactions older than the oldest one still
// running. Every transaction below that horizon has ended: its rows are all
// visible now (the function reads the statement's own snapshot) or never
// will be (it aborted), so no row can ever appear below a position the
// reader has passed, and the reader never skips one. The test that shows
// it: TestGapCheckFailsBySequenceAlone runs the conformance suite's Gap
// check — a transaction that takes a low seq and commits after later ones —
// on a reader by seq alone, which fails it; the source passes it.
//
// The cost is latency, not loss: while a transaction that has written
// anything (to any table of the cluster) is open, rows committed after it
// began wait for it to end. Keep write transactions short; an idle one
// holding an xid stalls the source (idle_in_transaction_session_timeout
// bounds it). The reader then looks again every few milliseconds, backing
// off to PollInterval, until the rows come into sight.
// Run looks for such a transaction every LagEvery: once one older than
// Config.HorizonWarnAfter holds rows back, it logs a warning naming its
// pid, [Source.Blocker] returns it and
// inorder_source_horizon_blocked_seconds is its age, while the lag in
// seconds keeps growing.
//
// Rows are ordered by the TxID column's value, never by its text (a text
// order puts "100002" before "99965", and a reader going by it would pass
// the shorter id and skip its rows).
//
// # Partitions and leases
//
// The aggregate space is cut into Config.Partitions partitions
// (mod(hashtext(aggregate) & 2147483647, 16) by default, the expression of
// the table's index), each read in (txid, seq) order by one process at a
// time, with its own checkpoint row (<Name>/<partition>) in the processor's
// checkpoints table. Processes with the same Name share the partitions:
// each holds a session advisory lock per partition it reads, and one per
// live process, whose count gives each its share (Partitions ÷ processes);
// every LeaseEvery they take the partitions nobody holds and give up those
// beyond their share (after committing what they read). A process that dies
// loses its connection and PostgreSQL releases its locks at once: the
// others take its partitions at their next balancing, from the partition's
// checkpoint — the events it had read and not committed are read again,
// and those it committed after the checkpoint are absorbed by the gate as
// duplicates. Since a partition is one process's at a time, the source
// marks its batches exclusive ([source.Config.Exclusive],
// [projection.Batch.Exclusive]): the gate takes fewer locks, and a process
// that still commits a partition another has taken costs at worst a
// deadlock, retried.
//
// # Checkpoints in the projection's transaction
//
// Each batch's transaction stores, through projection.Batch.Checkpoints,
// the low watermark of every partition it has deliveries of (the highest
// position whose predecessors in the partition are all committed, with the
// batch's own counted): the checkpoint and the effects it covers commit or
// roll back together. Batches commit out of order across workers, so the
// watermarks that later commits move are saved every CheckpointEvery, and
// at the end of a drain. The events table may be in the processor's
// database or another one (Config.Pool): the checkpoints are the
// processor's.
//
// # Wake-up
//
// A reader that caught up waits for a notification on Config.Channel
// (inorder's table has a trigger that notifies inorder_events with its
// schema at every commit of new rows), and reads again at the latest after
// PollInterval: an event appended on an idle system reaches the read model
// in a few milliseconds.
//
// # Lag, metrics, repair, rebuild
//
// [Source.MeasureLag] counts, per partition, the rows after its committed
// position and the age of the oldest (by the Time column);
// [Source.RegisterMetrics] exports the figures every source shares
// (inorder_source_lag_events, inorder_source_lag_seconds, the window and
// batches) and the partitions held. [Source.RepairNow] reads an aggregate's
// missing versions from the table. [Replayer] reads the table from its
// start for a rebuild, side by side ([projection.Processor.Build]) or in
// place. [Driver] is the source for package cli: 'inorder run --source
// postgres' (the events table of --database-url) or --source postgres://….
package pgtable
