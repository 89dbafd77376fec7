// Package store owns the statements on inorder's gate tables: every SQL
// statement the projection package runs on versions, applied, applied_log,
// quarantine, conflicts, rejected, checkpoints, operator_log and
// generation_epoch, and the advisory locks, is in this package, one file per
// table (versions.go, applied.go, quarantine.go, conflicts.go, rejected.go,
// checkpoints.go, oplog.go, epoch.go, locks.go), and nowhere else; a few
// statements read several tables at once (status.go, versionviews.go,
// seed.go, tables.go). The parked table is package buffer's; the effects
// table is package effects'. The generations table's reads are in
// generations.go; its writes are still projection's (its rebuild files).
//
// A Store holds the statements of one schema, with its tables qualified,
// built once by New. Each table's type offers what the gate does with the
// table, in two shapes:
//
//   - Queue… adds a statement to a *pgx.Batch and returns its
//     *pgx.QueuedQuery, for the caller to read the result with: the gate
//     sends each round trip's statements as one batch;
//   - the other methods run one statement on a Querier (a pool, a
//     connection or a transaction) and return its result.
//
// The statements are concrete pgx code: no ORM, no generated code. The
// schema's tables themselves are package migrations'.
package store
