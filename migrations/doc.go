// Package migrations holds inorder's database schema as numbered SQL files
// embedded in the binary, and a strict migrator that applies them.
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
// A database that has applied a version this binary does not know (it was
// migrated by a newer release) is refused with ErrUnknownVersion rather
// than silently used.
package migrations
