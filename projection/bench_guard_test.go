package projection_test

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/projection"
)

// benchGuard is how a bound of the inline fast path (benchKindInlineFloor,
// BenchmarkHotRows' setbased+inline) keeps a concurrent writer from
// creating, under it, the state of an aggregate it creates: one that starts
// at version 1 and has no row yet.
type benchGuard int

const (
	// guardRows inserts the new aggregates' empty version rows, as the gate
	// does: a concurrent writer that parks a later version of one inserts
	// the same key, and waits for the transaction.
	guardRows benchGuard = iota
	// guardNone leaves them out: a fenced owner's bound, correct only with
	// one writer per aggregate.
	guardNone
	// guardAdvisory takes a transaction advisory lock per new aggregate and
	// then probes its version row, which must not exist: a design that needs
	// no owner if every writer that creates a version row takes the same
	// lock first. Nothing is written; the locks live in the server's lock
	// table (max_locks_per_transaction × connections), not in the heap.
	guardAdvisory
)

// queueInlineGuard queues, before the handler's statements, the guard g of
// the aggregates fresh (sorted: the locks are taken in one order) of the
// projection with gate key key.
func queueInlineGuard(t *projection.Tx, key string, fresh []string, g benchGuard) {
	if len(fresh) == 0 {
		return
	}
	switch g {
	case guardRows:
		t.Queue(`INSERT INTO versions (projection, aggregate) SELECT $1, * FROM unnest($2::text[]) ON CONFLICT DO NOTHING`, key, fresh)
	case guardAdvisory:
		// Each aggregate's probe runs after its own lock: a writer that
		// created its version row before the lock was taken committed it.
		t.Queue(`SELECT count(v.*) FROM (
  SELECT a, pg_advisory_xact_lock(hashtextextended($1 || '/' || a, 0)) FROM unnest($2::text[]) AS k(a) OFFSET 0) k
CROSS JOIN LATERAL (SELECT 1 FROM versions WHERE projection = $1 AND aggregate = k.a OFFSET 0) v`, key, fresh).QueryRow(func(row pgx.Row) error {
			var n int
			if err := row.Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return fmt.Errorf("%d new aggregates have version rows", n)
			}
			return nil
		})
	}
}
