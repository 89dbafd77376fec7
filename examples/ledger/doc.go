// Package ledger is inorder's example projection: payments as double-entry
// ledger legs and per-account balances.
//
// Each payment is an aggregate. Its events — payment.authorized,
// payment.approved, payment.captured, payment.refunded, payment.voided,
// payment.failed — produce ledger legs that always balance (every event's legs
// sum to zero) and update account balances. The amounts depend on order: a
// capture takes at most what is still authorized, a refund at most what was
// captured and not yet refunded, a void releases whatever hold remains. So a
// read model built in the wrong order, or with an event applied twice, differs
// from the in-order fold ([Fold]) — which is what makes it a good test of the
// gate.
//
// [Projection] implements both projection APIs: [Projection.ApplyBatch] is the
// set-based one (one query to read the payments, unnest writes), and
// [Simple] wraps it as a per-event projection for comparison.
//
// # Settlement webhooks
//
// With [Options].Effects, the projection also tells the outside world: every
// capture that moves money records a "payment settled" webhook intent
// ([SettledWebhook], package effects) in the transaction that applies it, and
// [Webhook] sends it with the intent's key as Idempotency-Key — once per
// settlement, whatever the deliveries, retries and rebuilds.
// [Settlements] lists the settlements a stream must notify.
//
// Tables (created by Setup in the configured schema, default: the connection's
// search_path): ledger_payments, ledger_legs and ledger_balances.
package ledger
