// Package nats feeds a [projection.Processor] from a NATS JetStream stream,
// through a durable pull consumer of the official client
// (github.com/nats-io/nats.go/jetstream; the core package is imported here
// as natsc).
//
// # Delivery
//
// [Source.Run] creates or updates the durable consumer [Config].Consumer
// on [Config].Stream (filtered by [Config].Subjects) with explicit acks and
// pulls its messages, dispatching them to [Config].Workers workers by
// aggregate (see package [source]); each worker commits batches of up to
// [Config].BatchSize events in one transaction. A message is acknowledged
// only after the transaction that processed it committed. When a batch
// fails, its messages are nacked with a delay that grows with their
// deliveries ([Config].NakDelay … NakDelayMax) and the server delivers them
// again, to this process or another. A message whose handler keeps failing
// is quarantined by the processor and then acknowledged: the consumer has
// no MaxDeliver, and nothing is dropped.
//
// JetStream delivers at least once and, with several processes, in any
// order: a message may arrive again after AckWait, a nak, a reconnection
// or the death of the process that held it, and one aggregate's messages
// may be spread over processes. The gate absorbs all of it: duplicates are
// discarded, versions that arrive before their predecessors are parked and
// applied once those commit.
//
// # Window, MaxAckPending and AckWait
//
// A process holds at most [Config].ReadAhead messages dispatched and not
// acknowledged (its window, [source.DefaultWindow] by default: 3 × Workers
// × BatchSize) plus [Config].PullBatch buffered by the client. The consumer's
// MaxAckPending, which bounds what the server delivers without acks over
// all its processes, defaults to [DefaultShare] (4) such windows. Past it
// the server stops delivering without a word: a worker holding a partial
// batch would wait MaxWait for it to fill, and the process's window, which
// would close the batch, is not full. The source notices it instead —
// no message for a moment while the last one said the server had more —
// and closes the partial batches at once ([Stats].Kicks, the metric
// inorder_source_held_back_total); their acks let the server deliver
// again. When the last message said nothing more was pending, the source is
// caught up and a partial batch waits MaxWait for a trickle of live events,
// as with any source.
//
// AckWait defaults to the time a full window takes at 1,000 events/s
// ((ReadAhead + PullBatch) × 1 ms), between [MinAckWait] and [MaxAckWait]
// (5 to 30 s): it is what a process that dies costs — its messages wait that
// long before the server delivers them to another. Messages held longer
// than a third of AckWait (a slow transaction, a batch retried, a full
// window) get an in-progress ack every AckWait/3, so the server does not
// deliver them again while this process still works on them
// ([Stats].InProgress).
//
// # Several processes
//
// Any number of processes may run the same Config: they share the durable
// consumer, and the server hands each pull request the next messages. A
// process that stops gracefully hands the messages it buffered back at once
// (nak) and commits what it dispatched; one that is killed loses nothing
// either — its messages come back after AckWait. See docs/sources/nats.md
// for the costs of scaling out.
//
// # Mapping
//
// [Mapping] says where each part of the event is: a header, a field of the
// JSON payload, or a token of the subject. By default the aggregate id, the
// version and the type are the headers Inorder-Aggregate, Inorder-Version
// and Inorder-Type, the metadata Inorder-Metadata, and the event id
// Nats-Msg-Id — or, when a message has none, "<aggregate>:<version>",
// derived from the fact. [NewMsg], [Publish], [PublishAsync] and
// [PublishAll] set those headers, with Nats-Msg-Id = the event's stable
// id, so that the stream's duplicate window stores a republished event
// once. A message without an aggregate id, with a version that is not an
// integer ≥ 1, or whose payload is not a JSON object where a field is
// mapped from it is rejected by the source (with the Kafka source's rules
// and wording: one parser maps both), one whose payload is not JSON (or
// too large, or holding NUL bytes) by the processor; either way it is
// recorded in the rejected table — with, for the source's rejects, where it
// is in the stream — and acknowledged: a bad envelope never blocks the
// consumer.
//
// # Lag
//
// [Source.Lag] is the consumer's: the messages not acknowledged (not yet
// delivered plus delivered and not acknowledged, over all processes) and
// the age of the oldest of them, the first message after the consumer's ack
// floor. Run measures it every [Config].LagEvery; [Source.MeasureLag]
// measures it now, with or without Run.
//
// # Replay
//
// [Replayer] reads the stream from its first message with an ordered
// consumer and is the [projection.Replay] that a rebuild in place needs. A
// stream whose retention or a purge removed messages cannot be replayed
// from its start: Replay says why ([ErrIncomplete]) unless
// [Replayer].AllowIncomplete is set.
//
// # Metrics
//
// [Source.RegisterMetrics] registers, every series labelled
// source=<Config.Name> (the EventStoreDB source's names where the figure is
// the same):
//
//	inorder_source_received_total                    messages received, redeliveries included
//	inorder_source_redelivered_total                 messages the server had delivered before
//	inorder_source_acked_total                       messages acknowledged after their batch committed
//	inorder_source_nacked_total                      messages nacked after a failed batch, or handed back at a stop
//	inorder_source_in_progress_acks_total            in-progress acks sent
//	inorder_source_held_back_total                   partial batches closed because the server held messages back
//	inorder_source_reconnects_total                  reconnections, and sessions on the consumer after the first
//	inorder_source_in_flight_events                  messages dispatched and not settled
//	inorder_source_window_events                     the window (ReadAhead)
//	inorder_source_batches_total{reason}             batches closed: full, window, max_wait, flush, retry
//	inorder_source_batch_fill_ratio                  histogram of batch size ÷ BatchSize
//	inorder_source_worker_wait_seconds_total{state}  workers waiting for input: idle, filling
//	inorder_source_lag_events                        messages not acknowledged (absent until measured)
//	inorder_source_lag_seconds                       age of the oldest of them (0 when none)
//	inorder_projection_lag_events{projection}        the same, per projection
//	inorder_projection_lag_seconds{projection}
//	inorder_projection_last_applied_sequence{projection}
//	inorder_projection_last_applied_timestamp_seconds{projection}
//
// # Lifecycle
//
// [Source.Run] runs until its context is cancelled, then drains: it stops
// pulling, hands back what the client buffered, commits and acknowledges
// the batches in flight and returns nil. [Source.Abort] (the second signal)
// or [Config].DrainTimeout cut the drain short ([ErrAborted]). The
// connection reconnects on its own (for ever); when the consumer is lost —
// deleted, its stream missing, a node down — Run binds again with backoff
// ([Config].ReconnectMin … ReconnectMax). What the server rejects for good
// stops Run with [ErrRejected].
//
// # Tests
//
// The package's tests run the real client against real servers started in
// process by package [github.com/inorder/inorder/source/nats/natstest]: a
// single node, restarted under a running source, and a three-node cluster
// holding an R3 stream, one of whose nodes is killed and restarted while
// three worker processes share the consumer and are SIGKILLed in turn.
//
// # Files
//
// From the bottom up: mapping.go maps a message to an aggregate.Event;
// held.go lists the messages held; config.go holds Config and its
// defaults; source.go the Source, its state and counters, and the acker;
// consumer.go the durable consumer; lag.go the lag; replay.go and stream.go
// the Replayer of a rebuild; feed.go the source as a source.Feed and the
// mapping it records; run.go New and Run; metrics.go the collector;
// driver.go the Driver of a worker binary; publish.go the helpers that
// publish events.
package nats
