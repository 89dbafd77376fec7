package ledger

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// handWritten returns the payments' upserts as ledger.go wrote them by hand
// before projection.InlineUpsert (commit 696e2d7): the plain one, and the
// inline one with the gate's log and condition.
func handWritten(payments string, it projection.InlineTable) (plain, inline string) {
	plain = `INSERT INTO ` + payments + ` (payment_id, payer, payee, status, authorized, captured, refunded, version)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[])
ON CONFLICT (payment_id) DO UPDATE SET status = EXCLUDED.status, authorized = EXCLUDED.authorized,
  captured = EXCLUDED.captured, refunded = EXCLUDED.refunded, version = EXCLUDED.version, updated_at = now()`
	inline = `INSERT INTO ` + payments + ` AS pm (payment_id, payer, payee, status, authorized, captured, refunded, version, inorder_log)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bytea[])
ON CONFLICT (payment_id) DO UPDATE SET status = EXCLUDED.status, authorized = EXCLUDED.authorized,
  captured = EXCLUDED.captured, refunded = EXCLUDED.refunded, version = EXCLUDED.version, updated_at = now(),
  ` + it.SetLog("pm") + `
WHERE ` + it.Condition("pm")
	return plain, inline
}

var (
	spaces = regexp.MustCompile(`\s+`)
	quoted = regexp.MustCompile(`"([a-z_][a-z0-9_]*)"`)
)

// normalize writes sql's tokens one way: runs of white space as one space,
// and a lower-case identifier unquoted (PostgreSQL reads "version" and
// version alike).
func normalize(sql string) string {
	return quoted.ReplaceAllString(spaces.ReplaceAllString(strings.TrimSpace(sql), " "), "$1")
}

// TestPaymentsUpsertAsHandWritten: the statements InlineUpsert writes for
// the payments are the ones ledger.go wrote by hand, token for token — so
// BenchmarkLedger sends the same SQL — except for the plain upsert's alias
// (pm, which its SET does not use), and PostgreSQL plans them alike.
func TestPaymentsUpsertAsHandWritten(t *testing.T) {
	t.Parallel()
	for _, schema := range []string{"", "books"} {
		p := New(&Options{Schema: schema, LogEntries: 32})
		plain, inline := handWritten(p.t.payments, p.payments.Table)
		require.Equal(t, normalize(inline), normalize(p.payments.SQL(true)), "schema %q", schema)
		require.Equal(t, normalize(strings.Replace(plain, " (payment_id,", " AS pm (payment_id,", 1)),
			normalize(p.payments.SQL(false)), "schema %q", schema)
	}

	db := pgtest.New(t)
	ctx := context.Background()
	p := New(nil)
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return p.Setup(ctx, tx) }))
	plain, inline := handWritten(p.t.payments, p.payments.Table)
	args := []any{[]string{"pay-1"}, []string{"alice"}, []string{"shop"}, []string{"captured"},
		[]int64{1000}, []int64{600}, []int64{0}, []int64{2}}
	explain := func(sql string, args ...any) string {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `EXPLAIN (VERBOSE, COSTS OFF) `+sql, args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.NotEmpty(t, lines)
		return strings.Join(lines, "\n")
	}
	withLog := append(append([]any{}, args...), [][]byte{make([]byte, 8)})
	require.Equal(t, explain(inline, withLog...), explain(p.payments.SQL(true), withLog...))
	// The plain upsert's plan names the table's alias: the rest is alike.
	got := explain(p.payments.SQL(false), args...)
	require.Contains(t, got, "ledger_payments pm\n")
	require.Equal(t, explain(plain, args...), strings.Replace(got, "ledger_payments pm\n", "ledger_payments\n", 1))
}
