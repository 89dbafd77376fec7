// Package effects performs effects that leave PostgreSQL — a webhook, an
// e-mail, a payment-gateway call — once per fact, from projection handlers.
//
// The gate makes a projection's writes exactly-once inside Postgres. A call
// to another system cannot be rolled back with them, and a retry repeats it;
// no broker, queue or framework can make such a call happen exactly once.
// What can be built, and what this package builds, is:
//
//   - an intent recorded in the same transaction as the state change that
//     causes it, so it exists if and only if the event was applied;
//   - an idempotency key derived from the fact, never from the attempt, so
//     every retry of the call carries the same key and the remote side can
//     apply it once;
//   - a query of the remote state before retrying a call whose outcome is
//     unknown, for remote sides without idempotency keys;
//   - periodic reconciliation of intents whose outcome stays unknown.
//
// # Recording intents
//
// A handler records intents through the transaction it is given:
//
//	func (p *Payments) ApplyBatch(ctx context.Context, tx *projection.Tx, events []aggregate.Event) error {
//		// … the projection's own writes …
//		var intents []effects.Intent
//		for _, e := range events {
//			if e.Type == "payment.captured" {
//				intents = append(intents, effects.Intent{Kind: "payment.settled.webhook", Event: e, Args: payload(e)})
//			}
//		}
//		_, err := p.fx.Record(ctx, tx, intents...)
//		return err
//	}
//
// Record inserts one row per intent into the effects table (migrations 004,
// 006 and 009) — for more than DirectJobs intents a plain insert under a
// savepoint, falling back to INSERT … ON CONFLICT (key) DO NOTHING when a
// key exists —, sent in one round trip with the handler's queued statements,
// and River jobs for the rows it inserted, in the handler's transaction:
// both commit with the projection's writes and the event's version, or
// neither does. Up to DirectJobs intents get a job each; more get one relay
// job, which enqueues theirs once the transaction committed — a River row
// per intent would cost a large batch's transaction about as much as the
// intents themselves. The primary key is the
// intent's key (Intent.Key): a name-based UUID (version 8, SHA-256) of the
// projection's name, the event's stable id, the effect kind and an optional
// discriminator (several effects of one kind per event) and salt. A
// redelivered, parked-then-drained, retried, replayed or concurrently
// delivered event therefore records its intent once — the table's
// constraint decides, not a check before the insert, which would race
// exactly when two copies arrive at once.
//
// The key contains no rebuild generation: a rebuild (in place or side by
// side) replays the same facts, gets the same keys, and records and sends
// nothing again. A projection that must send again on purpose sets
// Intent.Salt: a new salt gives every fact a new key, sent once per salt.
//
// # Performing them
//
// A Handler of the intent's kind performs it. Client.Start (or Run) works the
// River jobs, in any number of processes at once. An attempt:
//
//  1. claims the intent with one committed statement — only a pending or
//     retrying intent, or a running one whose claim expired (its worker
//     died), can be claimed — and, before any call, marks its outcome
//     uncertain and counts the attempt; the claim lasts Config.Lease
//     (default 2×Config.Timeout), longer than any call;
//  2. asks the handler's Reconcile (see Reconciler) first, if the last
//     attempt's outcome is uncertain: if the remote side has it, the intent
//     is done without another call;
//  3. calls Handler.Perform with the Effect, whose Key the handler passes to
//     the remote side (an Idempotency-Key header, a message id, a ledger
//     reference);
//  4. records the outcome, if the claim is still its own: done; failed for
//     an error wrapped with Permanent (the River job is cancelled: River
//     stops retrying); retrying, uncertain, for any other error — River
//     retries the job after Config.RetryBackoff, doubling up to
//     Config.MaxBackoff, until Config.MaxAttempts, after which the intent is
//     failed.
//
// River's jobs are only wake-ups: a job whose intent is done, failed or
// cancelled completes without calling anything, and one whose intent
// another attempt holds waits for the claim to end. That matters because
// River's own unique jobs are not a durable dedupe — River deletes completed
// jobs after a retention period (24 h by default), after which a unique
// insert succeeds again. The effects table keeps every intent; it is the
// arbiter.
//
// # Uncertain outcomes
//
// A call that times out, answers 5xx or loses its connection may have been
// applied; a worker killed after the call and before recording the outcome
// leaves the intent running with a claim that expires. In both cases the
// intent is uncertain, and:
//
//   - with a remote side that honours idempotency keys, the retry calls
//     again with the same key and the remote side applies it once;
//   - with a Reconciler, the retry asks first and does not call again if
//     the remote side has it;
//   - with neither, the retry may apply it twice. No protocol can prevent
//     that: see docs/guarantees.md.
//
// Client.ReconcileStuck, the reconciliation pass (every
// Config.ReconcileInterval in a started Client), asks Reconcile about
// failed intents whose last outcome is uncertain, settling as done those
// the remote side has; and it takes up the intents of dead executors.
//
// # Dead executors
//
// A process killed at any instruction leaves its intents in one of a few
// states: running under a claim that expires, or pending or retrying with a
// River job (or its batch's relay job) held by the dead client, which
// River would only rescue after Config.RescueAfter. The pass finds both —
// an expired claim, or a River job that has run for Config.Lease without
// holding its intent — and gives each intent with no other live job a new
// one: it is attempted again within Lease + ReconcileInterval +
// PollInterval of the death (Client.Recovery states the bounds). The claim
// alone decides who calls, so the added jobs cannot make two attempts call
// at once: see Recovery for the policy and why it adds no duplicate beyond
// the uncertain-outcome case. List and Stats show such intents
// (Effect.Orphaned, KindStats.Orphaned) until a pass takes them up, and
// Effect.Recoveries counts the times one did.
//
// # Operators
//
// Client.List, Get and Stats show the intents (Stats: open intents per kind
// — pending, running, retrying, failed, uncertain, orphaned — and the oldest
// waiting one); Client.Retry reopens a failed or cancelled intent;
// Client.Cancel gives one up. None of them needs the handlers: a Client
// built without any reads and acts on the table.
// Client.RegisterMetrics exports them to Prometheus. A binary built on
// package cli has them as the `inorder effects` commands (list, show, retry,
// cancel, reconcile, work), in `inorder status`, /v1/status and /metrics;
// see docs/operations.md.
//
// # River's tables
//
// River keeps its jobs in its own tables, in Config.RiverSchema (default:
// inorder's schema). MigrateRiver creates them. River's UI (riverui)
// pointed at that schema shows the effect jobs (kind JobKind, args: the
// intent's key and effect kind) and the relay jobs (kind RelayJobKind, args:
// a batch number).
//
// # Files
//
// From the bottom up: effects.go holds the vocabulary (Intent, Effect,
// Handler, the states, the job kinds, the errors); statements.go every
// statement on the effects table; client.go Config, the Client and its
// counters; record.go Record and the relay jobs; tracing.go the spans;
// recover.go the recovery policy and the takeover of orphans; operator.go
// what operators read and do (List, Get, Stats, Retry, Cancel); worker.go
// an attempt; metrics.go the collector; run.go New, Start, Stop, Run and
// the reconciliation pass. migrate.go creates River's tables.
package effects
