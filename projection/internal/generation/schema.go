package generation

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// This file holds how statements reach a generation's read-model schema:
// the search_path statements that put it first (the gate queues them
// around each handler; package projection's gennames.go) and InSchema,
// which runs a projection's own code (Setup, Reset, Verify) there.

// EnterSchemaSQL puts the quoted schema $1 first on the transaction's
// search_path, keeping the search_path it replaces in the transaction's
// inorder.search_path setting for LeaveSchemaSQL.
const EnterSchemaSQL = `SELECT set_config('search_path',
  CASE WHEN set_config('inorder.search_path', current_setting('search_path'), true) = '' THEN $1
       ELSE $1 || ', ' || current_setting('inorder.search_path') END, true)`

// LeaveSchemaSQL restores the search_path EnterSchemaSQL replaced.
const LeaveSchemaSQL = `SELECT set_config('search_path', current_setting('inorder.search_path'), true)`

// InSchema runs fn with schema first on tx's search_path (fn's statements
// through tx reach the generation's tables), then restores it. An empty
// schema changes nothing.
func InSchema(ctx context.Context, tx pgx.Tx, schema string, fn func() error) error {
	if schema == "" {
		return fn()
	}
	if _, err := tx.Exec(ctx, EnterSchemaSQL, pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("search_path: %w", err)
	}
	if err := fn(); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, LeaveSchemaSQL); err != nil {
		return fmt.Errorf("search_path: %w", err)
	}
	return nil
}
