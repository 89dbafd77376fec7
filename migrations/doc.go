// Package migrations holds inorder's database schema as numbered SQL files
// embedded in the binary, and a strict migrator that applies them. A
// program embedding inorder need not call it: projection.Processor.Setup
// applies the pending migrations before the projections' own setup. It is
// for what an operator decides: a dry run, the status, forcing an offline
// migration, a rollback (the inorder migrate command).
//
// Files live in sql/ and are named NNN_name.up.sql and NNN_name.down.sql.
// Versions start at 1 and have no gaps or duplicates, and every up
// migration has a down migration; New rejects anything else.
//
// The SQL uses unqualified names. The Migrator creates the target schema
// (default "inorder") if needed and runs every step in its own transaction
// with search_path set to that schema, so the same files can be installed
// into any schema. Applied versions are recorded in
// <schema>.schema_migrations. A PostgreSQL advisory lock keyed on the schema
// name serialises migrators, so several processes may call Migrate at once:
// one applies the pending steps, the others wait and then find nothing to
// do.
//
// The first line of every up migration is a directive: "-- inorder:online"
// for a migration that may run while the previous release's workers keep
// processing events (additive: new tables, columns with a constant default,
// indexes on new tables), "-- inorder:offline" for one that may not; text
// may follow after a space. New rejects a file without one. Migrate and
// MigrateTx refuse to apply anything, with an *OfflineError wrapping
// ErrWorkersConnected, when a pending migration is offline and other
// workers of the schema are connected (Migrator.Workers: those that
// Announce themselves, and older releases' sessions), unless
// Options.Force is set. Online steps wait a bounded time for their locks
// (Options.LockTimeout).
//
// A migration whose second line is "-- inorder:no-transaction" runs outside
// a transaction, for what PostgreSQL does not allow in one: an index built
// or dropped CONCURRENTLY, so that the table's writers are not blocked. It
// is online and holds one statement each way, CREATE INDEX CONCURRENTLY IF
// NOT EXISTS with a name and DROP INDEX CONCURRENTLY IF EXISTS, so that it
// can run again after a crash; an invalid index a failed build left is
// dropped before the build is tried again. New rejects CONCURRENTLY in a
// migration without the line. MigrateTx runs such a step in the caller's
// transaction without CONCURRENTLY.
//
// A database that has applied a version this binary does not know (it was
// migrated by a newer release) is refused with ErrUnknownVersion rather
// than silently used — unless that release recorded every such version as
// online (schema_migrations.online): then Migrate finds nothing to do and
// Status lists them as Unknown and Online, so that this release's workers
// keep working, and stay ready, during a rolling upgrade. Rollback refuses
// either way.
package migrations
