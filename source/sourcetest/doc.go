// Package sourcetest is the conformance suite of inorder's sources: every
// source (EventStoreDB, the PostgreSQL events table, NATS JetStream, Kafka…)
// runs it, through the real source against a real server, in the spirit of
// Watermill's pubsub/tests.TestPubSub and of package projectiontest.
//
// A source describes itself with a [Subject]: what it can do ([Features]),
// how to make an isolated [Case] on its server (its own stream, table,
// topic; Publish; optionally Hold, for a transaction that takes a low
// position and commits late, and Restart, for the server), and how to start
// a consumer from a case's environment — in the test process and, for the
// crash and scale-out checks, in child processes (re-executions of the test
// binary). [Run] then checks, with a projection of its own that records
// every version it applies, in order, and who applied it:
//
//   - Fold: a stream with republished copies reaches the read model once
//     per event, in batches, in per-aggregate order; nothing parked,
//     quarantined, rejected or in conflict; a graceful stop drains;
//   - Lag: measured in events and seconds, behind while events wait, 0
//     once caught up, and exported as inorder_source_lag_events and
//     inorder_source_lag_seconds{source=<name>};
//   - SIGKILL: a consumer killed mid-run in a child process is resumed by
//     another from its checkpoint — nothing lost, the redelivered events
//     absorbed by the gate, fewer of them than were applied before the kill;
//   - Failures: deliveries whose batches fail (transient errors) end
//     applied, redelivered by the source or retried by its workers; an
//     event whose handler always fails ends quarantined, its successors
//     parked — nothing dropped, and the position moves on;
//   - Hostile: envelopes without aggregate id, with a version below 1,
//     invalid JSON, NUL bytes or oversized are recorded as rejected and do
//     not block what follows;
//   - Gap (with Case.Hold): a transaction that holds a low position and
//     commits after later ones is still delivered;
//   - Restart (with Case.Restart): the server restarts mid-run and the
//     source carries on without returning an error;
//   - Share (with Features.CompetingConsumers): three processes consuming
//     as one share the work; one is SIGKILLed and the others take over its
//     share: the time from the kill to their first commit on it is logged
//     as the handover time.
//
// A test package runs the suite and lets the test binary serve as the
// child processes:
//
//	func TestMain(m *testing.M) { sourcetest.Main(m, subject()) }
//
//	func TestConformance(t *testing.T) { sourcetest.Run(t, subject()) }
//
// The processor's schema is a fresh one per check, on the test database of
// package internal/pgtest.
package sourcetest
