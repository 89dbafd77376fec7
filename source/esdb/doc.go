// Package esdb feeds a [projection.Processor] from EventStoreDB (through the
// official v4 Go client, github.com/EventStore/EventStore-Client-Go/v4/esdb,
// imported here as esdbc), in one of two modes.
//
// # Catch-up mode (the default)
//
// A catch-up subscription to $all, filtered on the server by stream-name
// prefixes ([Config].StreamPrefixes, by default the mapping's prefix) or by
// an event-type regex ([Config].TypeRegex; applied on the client when stream
// prefixes are set too). Events are dispatched to [Config].Workers workers by
// aggregate (see package [source]); each worker commits batches of up to
// [Config].BatchSize events in one transaction.
//
// The position is kept in Postgres, in the checkpoints table of the
// processor's schema (row [Config].Name), and written in the same transaction
// as the projections' writes. With several workers batches commit out of
// order, so the checkpoint is a low watermark: the highest position P such
// that every event at or before P is committed ([source.Tracker]). It never
// moves back (a lower position leaves the row as it is). Events the source
// skips (see Mapping) move the watermark too, and it is saved every
// [Config].CheckpointEvery even when no event is processed. By default only
// positions of events the source received are saved: the server's own
// checkpoint messages, which could skip filtered-out history on a restart,
// are ignored unless [Config].TrustServerCheckpoints is set, because some
// server releases sent them ahead of events not yet delivered (see Supported
// servers). After a crash (even SIGKILL) the source resumes from the
// committed checkpoint: events after it may be delivered again, and the
// processor's version gate discards them as duplicates.
//
// # Persistent mode
//
// With [Config].Persistent set, the source is one consumer of a persistent
// subscription group (to $all, filtered like catch-up mode, or to a stream
// such as "$ce-payment"), created with [Persistent].Settings if it does not
// exist. Any number of processes may consume the group. An event is acked
// only after the transaction that processed it commits; a failed batch is
// nacked for a retry. Events arrive out of order and more than once —
// redelivered after a timeout, a disconnect or a server restart — and the
// gate absorbs it. An event whose handler keeps failing is quarantined by the
// processor and then acked: poison events never go to the server's parked
// stream.
//
// # Keeping batches full
//
// Each mode keeps a window of events in flight — received and not yet
// committed: [Config].ReadAhead in catch-up mode, [Persistent].BufferSize
// (the window the server enforces) in persistent mode. Both default to
// [source.DefaultWindow], 3 × Workers × BatchSize (6,000 with the
// defaults): a batch in each worker's transaction, the next one filling, and
// a batch of headroom for uneven partitions. A smaller window starves the
// workers: with 4 workers × 50 events and a buffer of 200, batches averaged
// 31 events and each process sat mostly waiting. A worker closes a partial
// batch at once when the window is full, since nothing more can come until
// a batch commits (see package [source]). [Stats].Dispatch and the metrics
// (see RegisterMetrics) show batches by fill and close reason, the window
// in use, and the time workers waited for input.
//
// Competing consumers: a group the source creates with the default
// settings uses the Pinned strategy, which sends all the events of a
// stream to one consumer, in order, so that competing consumers rarely
// park — on servers that keep Pinned groups' checkpoints right
// ([PinnedCheckpointsFixed]: KurrentDB 26.1.0 and later, 26.0.3 and later
// 26.0 releases, 24.10.14 and later 24.10 releases, with the fix of
// kurrent-io/KurrentDB#5497, DB-1912). On other servers, where a Pinned
// group could write a checkpoint past undelivered events and skip them after
// a restart, it uses RoundRobin and logs a warning. RoundRobin deals one
// aggregate's events to every consumer, so in a group of several processes
// many events arrive before their predecessors committed; the gate parks
// them and applies them later — correct, but it costs writes, and two
// processes ran at about half the speed of one catch-up subscription in the
// benchmarks (docs/benchmarks.md). Set the strategy yourself in
// [Persistent].Settings (ConsumerStrategyName), or with 'inorder run
// --consumer-strategy' — a pinned strategy asked for on a server without
// the fix is used, with a warning; a group that exists keeps the strategy
// it was created with. To move one to Pinned, point the workers at a new
// group ('inorder run --group'): created from the start of the stream, it
// delivers again what the old group delivered, which the gate discards as
// duplicates — safe, at the cost of reading the history once more.
//
// The limit is time: in persistent mode an event waits unacknowledged for
// about BufferSize ÷ the consumer's throughput (6,000 events at 15,000
// events/s: 0.4 s), and the group's MessageTimeout (30 s by default) must
// stay well above it, or the server times events out and sends them again
// (the gate discards the copies, at a cost). A real node also reads a
// group's history in ReadBatchSize pages (20 by default) into a
// HistoryBufferSize (500) buffer, which can bound a persistent
// subscription's rate before the window does; set them in
// [Persistent].Settings when the source creates the group.
//
// # Mapping
//
// [Mapping] turns an EventStoreDB event into an [aggregate.Event]: the stream
// name (without [Mapping].StreamPrefix) is the aggregate id, revision+1 the
// version (or a field of the metadata JSON, [Mapping].VersionField), the
// event's UUID its stable id, with its type, data, user metadata and creation
// time. System events ("$" streams or types), link events that do not
// resolve and streams outside the prefix are skipped: acknowledged and
// counted ([Stats].Skipped). An event whose content type is not JSON is
// rejected with a reason — recorded in the rejected table in the batch's
// transaction — and acknowledged, and the subscription goes on; JSON content
// that is malformed is mapped as it is, and the processor rejects it.
//
// # Gap repair
//
// Every [Config].RepairEvery, aggregates whose parked events have waited
// longer than [Config].RepairAfter are repaired: the missing versions are
// read straight from the aggregate's stream ([Mapping].Stream) and processed.
// With [Mapping].VersionField the stream's order need not be the versions'
// (versions written 1,3,2; a version re-sent later under a new event id), so
// the stream is scanned from its first event until every missing version is
// found, and the first occurrence of a version in stream order is the one
// processed — what a catch-up subscription would have applied.
// Versions the stream does not have (deleted, truncated, never written) are
// recorded once per gap in the operator log (action
// 'gap-missing-at-source'), and left to an operator
// ([projection.Processor.DeclareGap]). [Source.RepairNow] runs the same
// repair once, on demand — for one projection or aggregate, whatever the
// age of its parked events ([RepairOptions]) — with or without Run; the
// CLI's 'parked repair' is built on it.
//
// # Replay
//
// [Replayer] reads $all up to its current end, mapped and filtered like the
// source of the same [Config], and emits it partitioned by aggregate: its
// Replay method is the [projection.Replay] that
// [projection.Processor.Build] needs to rebuild a projection in place from
// EventStoreDB (the CLI's 'rebuild --in-place' uses it), with [Replayer.Progress] for
// progress reports.
//
// # Connections
//
// When the server is lost the source reconnects with exponential, jittered
// backoff ([Config].ReconnectMin … ReconnectMax, the policy of package
// internal/retry), with a new client each time (a v4 client whose node
// discovery failed stays closed for good), and resubscribes — in catch-up
// mode from the last committed checkpoint, after the batches in flight were
// settled — so nothing is lost and nothing is applied twice. A subscription
// the server rejects for good — access denied, a persistent subscription
// group that does not exist while [Persistent].NoCreate is set, a tombstoned
// stream, a request it does not support or finds invalid — is not retried:
// Run drains and returns an error wrapping [ErrRejected] that says what to
// fix.
//
// # Lag
//
// [Source.Lag] says how far the source is behind the head of what it reads,
// per source and per projection: events not committed yet (received and in
// flight, plus not yet received) and the age of the oldest of them, the
// newest event matching the filter, and each projection's last applied
// event (position and creation time). Run measures it every
// [Config].LagEvery (5 s); [Source.MeasureLag] measures it now, with or
// without Run — from the committed checkpoint in catch-up mode, from the
// group's statistics in persistent mode (GetPersistentSubscriptionInfo,
// which esdbtest serves too) — so 'inorder status' and readiness checks can
// ask a Source that is not running. Lag.Behind is 0 when nothing is behind,
// so an idle stream shows no lag, and it grows while events wait.
//
// # Metrics
//
// [Source.RegisterMetrics] registers the source's collectors on a
// prometheus.Registerer, read at scrape time; every series has the label
// source=<Config.Name>:
//
//	inorder_source_received_total                       events received, redeliveries included
//	inorder_source_skipped_total                        events acknowledged without processing
//	inorder_source_acked_total                          deliveries settled after their batch committed
//	inorder_source_nacked_total                         deliveries nacked for a retry (persistent mode)
//	inorder_source_reconnects_total                     connection attempts after the first
//	inorder_source_repaired_total                       events read and processed by gap repair
//	inorder_source_gaps_missing_total                   gaps recorded as missing at the source
//	inorder_source_in_flight_events                     events received and not settled
//	inorder_source_window_events                        the window (ReadAhead or BufferSize)
//	inorder_source_batches_total{reason}                batches closed: full, window, max_wait, flush, retry
//	inorder_source_batch_fill_ratio                     histogram of batch size ÷ BatchSize
//	inorder_source_worker_wait_seconds_total{state}     workers waiting for input: idle, filling
//	inorder_source_lag_events                           events behind (absent until measured)
//	inorder_source_lag_seconds                          age of the oldest event behind (0 when none)
//	inorder_projection_lag_events{projection}           the same, per projection
//	inorder_projection_lag_seconds{projection}
//	inorder_projection_last_applied_commit_position{projection}
//	inorder_projection_last_applied_timestamp_seconds{projection}
//
// A low fill ratio with many window closes and little idle time means the
// window is too small; much idle time means the server sends too slowly.
//
// # Lifecycle
//
// [Source.Run] runs until its context is cancelled, then drains: it stops
// receiving, commits and acknowledges the batches in flight, saves the
// checkpoint and returns nil. [Source.Abort] (the second signal) or
// [Config].DrainTimeout cut the drain short. [Source.Stats] exposes counters
// for metrics, and the On… hooks of [Config] let tests wait on events.
//
// # Supported servers
//
// The source speaks EventStoreDB's gRPC protocol through the v4 Go client
// (v4.2.0): EventStoreDB 22.10 and later, and KurrentDB (the same server
// renamed, 24.10 and later). Persistent subscriptions to $all need 21.10 or
// later; a server without them rejects the subscription ([ErrRejected]).
// The package's tests run against the in-process server of package esdbtest
// (which reports 23.10.0) and, with ESDB_URL set, against a real node.
//
// Server checkpoints ([Config].TrustServerCheckpoints) are safe only on
// releases without the known bugs that sent a filtered $all subscription a
// checkpoint ahead of events it had not delivered: KurrentDB 25.0.0 and the
// 24.10 releases that carry kurrent-io/KurrentDB#4892 without its fix #4975
// (issue #4970; fixed in 25.0.1) send the end of the log, where the next
// event will be written; EventStoreDB 22.10 before its late-2023 patches
// sent an extra checkpoint on the switch to live (EventStore#4023). The
// default, which saves only positions of events the source received, is
// safe on every release.
//
// # Tests
//
// The package's tests run the real client against
// [github.com/inorder/inorder/source/esdb/esdbtest], an in-process
// EventStoreDB. Set ESDB_URL to run them against a real node instead:
//
//	docker compose up -d kurrentdb
//	ESDB_URL='esdb://localhost:2113?tls=false' go test -count=1 ./source/esdb/
//
// Every test then uses its own stream prefix and group names and does not
// assume an empty store; the tests that inject faults (dropped
// subscriptions, restarts, an unavailable node) need the in-process server
// and are skipped.
//
// # Files
//
// From the bottom up: mapping.go maps a recorded event to an
// aggregate.Event; config.go holds Config and its defaults; source.go the
// Source, its state and counters; checkpoint.go committed batches and the
// catch-up checkpoint; errors.go and recorded.go what the server rejects
// and the mapping the workers record; catchup.go and persistent.go the two
// kinds of session; repair.go gap repair; lag.go the lag; replay.go and
// stream.go the Replayer of a rebuild; run.go New and Run; metrics.go the
// collector; driver.go the Driver of a worker binary.
package esdb
