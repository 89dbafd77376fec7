package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// This file holds what every table's file takes: the connection a statement
// runs on and the naming of the schema's tables. store.go gathers the
// tables into a Store.

// querier runs one statement: *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy
// it. It is unexported so that the module has one Querier, the read side's
// projection.Querier (which this package cannot name: projection imports
// it); it adds Exec to that one's methods, the store writing too. Callers
// pass their pool, connection or transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// qualify returns the qualified name of one of the schema's tables.
type qualify func(table string) string
