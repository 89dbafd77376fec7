package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Store holds the statements on the gate tables of one schema. It holds no
// connection; each method takes the batch, or the pool, connection or
// transaction, to use. A Store is safe for concurrent use.
type Store struct {
	// Gate is the set of tables that hold a projection's gate state
	// (tables.go).
	Gate Gate
	// Checkpoints is the checkpoints table (checkpoints.go).
	Checkpoints Checkpoints
	// OpLog is the operator_log table (oplog.go).
	OpLog OpLog
	// Versions is the versions table (versions.go).
	Versions Versions
	// Applied is the applied table and the moves of the version rows'
	// logs into it (applied.go).
	Applied Applied
	// Quarantine is the quarantine table (quarantine.go).
	Quarantine Quarantine
	// Conflicts is the conflicts table (conflicts.go).
	Conflicts Conflicts
	// Rejected is the rejected table (rejected.go).
	Rejected Rejected
	// Locks are the advisory locks (locks.go).
	Locks Locks
	// Epoch is the generation_epoch table (epoch.go).
	Epoch Epoch
	// Generations is the generations table (generations.go).
	Generations Generations
	// Sources is the sources table (sources.go).
	Sources Sources

	projectionCounts string // status.go
}

// New returns the statements on the gate tables of schema.
func New(schema string) *Store {
	t := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	return &Store{
		Gate:        newGate(t),
		Checkpoints: newCheckpoints(t),
		OpLog:       newOpLog(t),
		Versions:    newVersions(t),
		Applied:     newApplied(t),
		Quarantine:  newQuarantine(t),
		Conflicts:   newConflicts(t),
		Rejected:    newRejected(t),
		Epoch:       newEpoch(t),
		Generations: newGenerations(t),
		Sources:     newSources(t),

		projectionCounts: projectionCounts(t),
	}
}

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
