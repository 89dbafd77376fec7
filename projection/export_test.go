package projection

import "github.com/jackc/pgx/v5"

// NewTx wraps a pgx transaction in the handler-facing *Tx, so tests outside
// the package can call a handler directly, without the gate (the set-based
// baseline of BenchmarkLedger does). Call Flush to send what it queued.
func NewTx(tx pgx.Tx) *Tx { return newTx(tx) }
