// Package store owns the statements on inorder's gate tables: every SQL
// statement the projection package (and its rebuild, package generation)
// runs on versions, applied, applied_log,
// quarantine, conflicts, rejected, checkpoints, operator_log, generations,
// generation_epoch and sources, and the advisory locks, is in this package,
// one file per table (versions.go, applied.go, quarantine.go, conflicts.go,
// rejected.go, checkpoints.go, oplog.go, generations.go, epoch.go,
// sources.go, locks.go), and nowhere else; a few statements read several tables at once
// (status.go, versionviews.go, seed.go, tables.go; generations.go's view of
// the fed generations reads the epoch with them, and its statement that
// records first generations moves the epoch). The parked table is package
// buffer's; the effects table is package effects'.
//
// A Store holds the statements of one schema, with its tables qualified,
// built once by New. Each table's type offers what the gate does with the
// table, in two shapes:
//
//   - Queue… adds a statement to a *pgx.Batch and returns its
//     *pgx.QueuedQuery, for the caller to read the result with (a listing
//     takes a function that receives the rows instead; a change made of a
//     few statements queues them in order and returns nothing): the gate
//     sends each round trip's statements as one batch;
//   - the other methods run one statement on the pool, connection or
//     transaction they are given and return its result.
//
// The statements are concrete pgx code: no ORM, no generated code. The
// schema's tables themselves are package migrations'.
package store
