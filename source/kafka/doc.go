// Package kafka feeds a [projection.Processor] from Kafka topics, as one
// member of a consumer group, through franz-go (github.com/twmb/franz-go,
// package kgo).
//
// # Positions in Postgres, in the batch's transaction
//
// The group divides the topics' partitions among its members (processes);
// Kafka's group offsets are not used. Each partition's position — the offset
// of the last record at or before which every record is committed — is a row
// of the processor's checkpoints table, "<Config.Name>/<topic>/<partition>",
// written in the same transaction as the projections' writes it covers
// ([projection.Batch.Checkpoints], through [source.Config.Checkpoints]): the
// offset and its effects commit together or not at all. Records are
// dispatched to [Config].Workers workers by aggregate (package [source]), so
// batches mix partitions and commit out of order; each partition has its
// own [source.Tracker], whose low watermark is what a batch stores. A
// process that dies (even SIGKILL) loses nothing: whoever gets its
// partitions resumes after their checkpoints, and the version gate discards
// the records delivered again.
//
// # Rebalances
//
// The client blocks rebalances while the poll loop holds records it has not
// dispatched (kgo.BlockRebalanceOnPoll), so the group's callbacks run
// between polls:
//
//   - on assignment, each new partition starts after its checkpoint (or at
//     its start, or its end with [Config].FromEnd, when it has none);
//   - on revocation, everything dispatched is committed first — batches mix
//     partitions, so the others' records in flight too — and the revoked
//     partitions' positions saved; only then does the group hand them over.
//     A graceful handover (a member joining, or one leaving after its
//     context was cancelled) repeats nothing: the next owner starts right
//     after the last committed record.
//   - a lost session (a member that missed its heartbeats) is drained the
//     same way; its partitions may have a new owner already, which reads
//     some records again — absorbed by the gate.
//
// The default balancer is cooperative-sticky: a rebalance revokes only the
// partitions that move; the others keep flowing. What a rebalance costs is
// the drain (the batches in flight, bounded by [Config].ReadAhead) and, after
// a crash, the group's session timeout before the partitions move
// (kgo.SessionTimeout, 45 s by default; 'run --kafka-session-timeout').
//
// # Mapping
//
// [Mapping] says where each part of an event is in a record: the record key
// (the default for the aggregate id: the default partitioner keeps a key's
// records in one partition, in order), a header, or a field of the JSON
// value; the NATS source takes the same specs. [NewRecord] writes what the
// default mapping reads. A record the mapping cannot turn into an event (no
// key, a missing or invalid version, a value that is not a JSON object where
// a field is mapped from it) is recorded as rejected, with its reason, in
// the batch's transaction, and its partition moves on; a tombstone (a record
// without a value) is passed. Records of aborted transactions are never read
// (isolation level read_committed). With the aggregate read from the key,
// one member of the group holds an aggregate's records at a time, and the
// source marks its batches exclusive ([source.Config.Exclusive],
// [projection.Batch.Exclusive]): the gate takes fewer locks. A producer
// whose partitioner spreads a key over partitions should have the
// aggregate read from a header instead, which leaves the batches unmarked.
//
// # Lag
//
// [Source.MeasureLag] compares, for each partition, the last stable offset
// with the offset after the checkpoint in Postgres: the whole group's lag,
// the same from any member (and without Run, for 'inorder status'). Behind
// is the age of the oldest record not committed, by its timestamp: taken
// from the records in flight, or read from the brokers. Run measures it
// every [Config].LagEvery. Retention that removed records before they were
// consumed is found at assignment, logged as an error and counted
// ([Stats].Truncated): the aggregates' later versions park, for an operator.
//
// # Replay
//
// [Replayer] reads the topics from offset 0 up to their last stable offset:
// Replay for a rebuild in place, Read (a [projection.Stream]) for a
// side-by-side build. A topic that no longer holds its whole history — a
// partition whose log start moved past 0, or a compacted topic — cannot be
// replayed: [Replayer.Check] and both reads return an error wrapping
// [ErrTruncated] that names the partitions and offsets, before anything is
// emitted.
//
// # Metrics
//
// [Source.RegisterMetrics] exports the figures every source shares
// (inorder_source_lag_events, inorder_source_lag_seconds, the window and
// batches) and the source's own, labelled source=<Config.Name>; see its
// documentation for the list.
//
// # Tests
//
// The package's tests run against kfake (github.com/twmb/franz-go/pkg/kfake),
// in-process brokers: 3 brokers, 12 partitions, with broker faults injected
// by its control functions, and worker processes (children of the test
// binary) SIGKILLed. No Kafka server is needed.
package kafka
