// Package esdbtest is an in-memory, in-process EventStoreDB for tests.
//
// It serves the gRPC protocol spoken by the official Go client
// (github.com/EventStore/EventStore-Client-Go/v4, v4.2.0) on 127.0.0.1,
// insecure, accepting any credentials:
//
//	srv := esdbtest.New(t)
//	cfg, _ := esdb.ParseConnectionString(srv.URL())
//	client, _ := esdb.NewClient(cfg)
//
// # What is served
//
//   - ServerFeatures.GetSupportedMethods: version [Options].Version
//     ([ServerVersion] by default); streams read/append/delete/tombstone
//     and persistent subscriptions to streams and to $all
//     (create/update/delete/read).
//   - Streams.Append with expected revision any / no_stream /
//     stream_exists / exact, WrongExpectedVersion answers, and
//     EventStoreDB's idempotency (re-sending the same event ids at the same
//     place succeeds without writing again).
//   - Streams.Read: stream reads forwards and backwards (start revision
//     inclusive; stream-not-found for missing and soft-deleted streams),
//     $all reads (forwards from a position inclusive, backwards from a
//     position exclusive), link ("$>") resolution for stream reads.
//   - Catch-up subscriptions to a stream or to $all (optionally filtered by
//     stream name or event type, prefixes or regex): confirmation, history,
//     caught-up, then live events. The start revision/position is excluded.
//     Filtered $all subscriptions get a checkpoint every
//     window*multiplier scanned events and when they catch up; a
//     checkpoint carries the position of the last scanned event, so it is
//     safe to resume from it (exclusive).
//   - Streams.Delete (soft delete, writes $tb=long.MaxValue metadata) and
//     Streams.Tombstone (hard delete: stream-deleted errors afterwards).
//     $metadata events written to "$$<stream>" apply their "$tb".
//   - Persistent subscriptions: see below.
//
// Persistent GetInfo answers a group's statistics (see
// [Server]'s persistent subscriptions below). Everything else (BatchAppend,
// gossip, projections, users, operations, persistent
// List/ReplayParked/RestartSubsystem) answers codes.Unimplemented. $maxCount/$maxAge and ACLs are not enforced.
//
// # Positions
//
// Every event gets a log position with commit == prepare. Positions are
// strictly increasing but sparse (they grow with the record size) and the
// first one is not zero, as in a real node. Truncated and deleted events stay
// in $all (a real node keeps them until a scavenge), and metadata events,
// tombstones and parked-message links are ordinary $all records in "$"
// streams: filter system events out where they do not belong.
//
// # Persistent subscriptions
//
// Groups are created on a stream or on $all (with filter) and start from
// the beginning, the end, or a revision/position (inclusive, unlike
// catch-up subscriptions). Consumers get a confirmation whose id is
// "<stream>::<group>", then events with their retry count, at most
// buffer-size unacknowledged ones each, dispatched round robin
// (DispatchToSingle fills the first consumer first; Pinned and
// PinnedByCorrelation send every event of a stream — the resolved event's —
// to the consumer its hash bucket is assigned to, and hold it while that
// consumer is full). Retries are delivered before new events, in event order.
//
// Pinned assigns buckets like KurrentDB's PinnedConsumerState
// (src/KurrentDB.Core/Services/PersistentSubscription/ConsumerStrategy/PinnedState/PinnedConsumerState.cs):
// a bucket is assigned when its first message is pushed, to the consumer
// with the fewest buckets; a joining consumer takes the buckets above
// ceil(assigned buckets / consumers) from the others, those with the
// fewest messages in flight first, so a stream whose events are being
// processed stays where it is unless a consumer has too few idle buckets to
// give; the buckets of a consumer that leaves are unassigned. PinnedByCorrelation
// hashes the stream too (KurrentDB hashes the $correlationId metadata when
// there is one).
// ResolveLinkTos is honored for stream groups (the ack id is the link's).
//
// A message is retried with retry count + 1 when it is nacked with Retry or
// Unknown, when its consumer disconnects and when the message timeout
// expires; once it has been retried MaxRetryCount times the next retry parks
// it instead. Nack Park parks at once. Nack Skip and Stop drop the message
// (Stop does nothing else, as in EventStoreDB). Parked messages are "$>"
// link events ("<revision>@<stream>") in the stream
// "$persistentsubscription-<stream or $all>::<group>-parked".
//
// The group checkpoints like EventStoreDB: after CheckpointUpperBound
// finished events, or every CheckpointAfter when at least
// CheckpointLowerBound are finished. [Server.Stop] (and Restart) behaves like
// a node restart: in-flight state is lost and the group resumes from its
// last checkpoint, so events acknowledged after it are delivered again
// (retry count 0). A group created from the end that never checkpointed
// resumes from the end at restart: events appended meanwhile are skipped,
// as in EventStoreDB. Set both checkpoint bounds to 1 to checkpoint after
// every acknowledgement.
//
// # Fault injection
//
// [Server.DropSubscriptions] ends every open subscription with
// codes.Unavailable; [Server.SetUnavailable] makes every RPC fail with
// codes.Unavailable; [Server.SetError] makes one RPC fail with the status
// of your choice (PermissionDenied, InvalidArgument…); [Server.Stop] and [Server.Restart] take the node down
// and up again on the same address, keeping the data.
//
// Note on the v4.2.0 client: after an RPC fails with Unavailable it
// rediscovers the node on the next call (10 attempts, 100 ms apart by
// default) and, if that fails, the *esdb.Client is closed for good
// (ErrorCodeConnectionClosed): create a new client then.
package esdbtest
