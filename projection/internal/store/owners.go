package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Owners is the owners table: the leases of fenced owners (see
// projection's owner.go and docs/owner.md). A row is never deleted: a lease
// that ends is vacated (its holder empty), so that its token keeps growing
// and no later owner ever gets a token an earlier one had. Checks and
// bumps ignore vacant rows.
type Owners struct {
	table  string
	take   string
	check  string
	bump   string
	drop   string
	vacate string
}

func newOwners(t qualify) Owners {
	owners := t("owners")
	return Owners{
		table: owners,
		take: `INSERT INTO ` + owners + ` AS o (gate_key, token, holder) VALUES ($1, 1, $2)
ON CONFLICT (gate_key) DO UPDATE SET token = o.token + 1, holder = EXCLUDED.holder, taken_at = now()
RETURNING o.token, o.foreign_n`,
		check: `SELECT token, foreign_n FROM ` + owners + ` WHERE gate_key = $1 AND holder <> '' FOR SHARE`,
		// bump runs after the statement that takes the fence (lockShared),
		// never in it: a statement's snapshot is taken before it runs, so
		// an UPDATE that waited for a take in its own plan would not see
		// the lease the take wrote (inserted, or a vacant row held again)
		// and would bump nothing.
		bump: `UPDATE ` + owners + ` SET foreign_n = foreign_n + 1 WHERE gate_key = $1 AND holder <> ''`,
		drop: `UPDATE ` + owners + ` SET holder = '' WHERE gate_key = $1 AND token = $2`,
		// vacate tries the lease's session lock ($2) for the statement's
		// transaction, once, before the scan: taken, no process holds the
		// lease, and a process that tries to take it meanwhile fails.
		vacate: `WITH l AS (SELECT pg_try_advisory_xact_lock($2) AS free)
UPDATE ` + owners + ` SET holder = '' WHERE (SELECT free FROM l) AND gate_key = $1 AND holder <> ''`,
	}
}

// QueueHeld queues the read of the leases held: rows of (gate key, holder,
// token, foreign_n, taken_at), one per owned key (a handful).
func (o Owners) QueueHeld(b *pgx.Batch) *pgx.QueuedQuery {
	return b.Queue(`SELECT gate_key, holder, token, foreign_n, taken_at FROM ` + o.table + ` WHERE holder <> ''`)
}

// Take takes the lease of gate key key for holder, fencing the previous
// holder's: it waits for the transactions that hold the row (FOR SHARE or
// a bump), and returns the lease's new token and the other writers' count.
// The caller holds the key's fence exclusively (Locks.Exclusive) first.
func (o Owners) Take(ctx context.Context, q querier, key, holder string) (token, foreign int64, err error) {
	err = q.QueryRow(ctx, o.take, key, holder).Scan(&token, &foreign)
	return token, foreign, err
}

// QueueCheck queues the read of key's lease, FOR SHARE: rows of (token,
// foreign_n), none when no one owns the key.
func (o Owners) QueueCheck(b *pgx.Batch, key string) *pgx.QueuedQuery {
	return b.Queue(o.check, key)
}

// Check reads key's lease as QueueCheck does: pgx.ErrNoRows when no one
// owns the key.
func (o Owners) Check(ctx context.Context, q querier, key string) (token, foreign int64, err error) {
	err = q.QueryRow(ctx, o.check, key).Scan(&token, &foreign)
	return token, foreign, err
}

// QueueBump queues, for a writer of key's gate state that is not its
// owner, the taking of key's fence (the advisory lock fence) shared and,
// in a statement of its own that runs once the fence is held, the bump of
// the other writers' count of key's lease (no row or a vacant one, no
// change): every such writer runs them in its transaction before its
// writes. The bump's command tag counts the rows bumped: one when someone
// holds the lease.
func (o Owners) QueueBump(b *pgx.Batch, fence int64, key string) *pgx.QueuedQuery {
	b.Queue(lockShared, fence)
	return b.Queue(o.bump, key)
}

// Bump runs QueueBump's statements, and reports whether someone holds the
// lease.
func (o Owners) Bump(ctx context.Context, q querier, fence int64, key string) (held bool, err error) {
	if _, err := q.Exec(ctx, lockShared, fence); err != nil {
		return false, err
	}
	ct, err := q.Exec(ctx, o.bump, key)
	return ct.RowsAffected() > 0, err
}

// Drop ends key's lease, vacating its row, if its token is still token.
func (o Owners) Drop(ctx context.Context, q querier, key string, token int64) error {
	_, err := q.Exec(ctx, o.drop, key, token)
	return err
}

// Vacate vacates key's lease if no session holds its session lock (the
// advisory lock lease): its owner is gone (killed, or its connection for
// the leases lost) and no one took it over. It reports whether it did.
func (o Owners) Vacate(ctx context.Context, q querier, key string, lease int64) (bool, error) {
	ct, err := q.Exec(ctx, o.vacate, key, lease)
	return ct.RowsAffected() > 0, err
}

// PendingInline lists the aggregates of the inline projection with gate key
// key (its rows in t) that have no row and a version row that holds
// something: parked versions, a quarantined one, or a version (an
// operator's gap). An owner must guard those when they come new.
func (v *Versions) PendingInline(ctx context.Context, q querier, key string, t InlineRef) (pgx.Rows, error) {
	return q.Query(ctx, `SELECT v.aggregate FROM `+v.table+` v
WHERE v.projection = $1 AND (v.parked > 0 OR v.blocked OR v.version > 0)
  AND NOT EXISTS (SELECT 1 FROM `+t.Table+` t WHERE t.`+t.Key+` = v.aggregate)`, key)
}
