// Package store owns the statements on inorder's gate tables: every SQL
// statement the projection package runs on versions, applied, applied_log,
// quarantine, conflicts, rejected, checkpoints and operator_log is in this
// package, one file per table, and nowhere else. The parked table is package
// buffer's; the effects table is package effects'.
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
