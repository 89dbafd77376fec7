package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Locks are the advisory-lock statements: a projection's rebuild lock
// (taken shared by every batch and operator action, held exclusively by an
// in-place rebuild), a side-by-side build's session lock, and the
// transaction locks that serialize writers of one operator-log entry. The
// keys are the caller's: the locks are not the schema's tables, so Locks
// holds no statement of its own schema.
type Locks struct{}

const (
	lockShared     = `SELECT pg_advisory_xact_lock_shared($1)`
	lockXact       = `SELECT pg_advisory_xact_lock($1)`
	lockSession    = `SELECT pg_advisory_lock($1)`
	tryLockSession = `SELECT pg_try_advisory_lock($1)`
	unlockSession  = `SELECT pg_advisory_unlock($1)`
)

// QueueShared queues the taking of the transaction's shared lock on key.
func (Locks) QueueShared(b *pgx.Batch, key int64) *pgx.QueuedQuery {
	return b.Queue(lockShared, key)
}

// Shared takes the transaction's shared lock on key, waiting for an
// exclusive holder.
func (Locks) Shared(ctx context.Context, q querier, key int64) error {
	_, err := q.Exec(ctx, lockShared, key)
	return err
}

// Exclusive takes the transaction's exclusive lock on key.
func (Locks) Exclusive(ctx context.Context, q querier, key int64) error {
	_, err := q.Exec(ctx, lockXact, key)
	return err
}

// Session takes the session's exclusive lock on key (q must be one
// connection), waiting for its holders; Release releases it.
func (Locks) Session(ctx context.Context, q querier, key int64) error {
	_, err := q.Exec(ctx, lockSession, key)
	return err
}

// TrySession takes the session's exclusive lock on key if no one holds it,
// and reports whether it did.
func (Locks) TrySession(ctx context.Context, q querier, key int64) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, tryLockSession, key).Scan(&ok)
	return ok, err
}

// Release releases the session's lock on key and reports whether the
// session held it.
func (Locks) Release(ctx context.Context, q querier, key int64) (bool, error) {
	var released bool
	err := q.QueryRow(ctx, unlockSession, key).Scan(&released)
	return released, err
}
