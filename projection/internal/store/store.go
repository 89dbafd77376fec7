package store

import "github.com/jackc/pgx/v5"

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
	// Status is the status view's reads across the gate tables
	// (status.go).
	Status Status
	// Owners is the owners table (owners.go).
	Owners Owners
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
		Status:      newStatus(t),
		Owners:      newOwners(t),
	}
}
