package projection_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/projection"
)

func TestSums(t *testing.T) {
	t.Parallel()
	s := projection.NewSums[string](pgx.Identifier{"s", "balances"}, "account", "balance", "moves")
	require.Equal(t, `INSERT INTO "s"."balances" AS inorder_t ("account", "balance", "moves")
SELECT u.c0, u.c1, u.c2 FROM unnest($1::text[], $2::bigint[], $3::bigint[]) WITH ORDINALITY AS u(c0, c1, c2, n) ORDER BY u.n
ON CONFLICT ("account") DO UPDATE SET "balance" = inorder_t."balance" + EXCLUDED."balance", "moves" = inorder_t."moves" + EXCLUDED."moves"`, s.SQL())
	s.Add("carol", 5, 1)
	s.Add("alice", 7, 1)
	s.Add("bob", -2, 1)
	s.Add("alice", -3, 1)
	require.Equal(t, 3, s.Len())
	require.Equal(t, []int64{4, 2}, s.Get("alice"))
	require.Nil(t, s.Get("dave"))
	keys, deltas := s.Sorted()
	require.Equal(t, []string{"alice", "bob", "carol"}, keys, "bytewise key order")
	require.Equal(t, [][]int64{{4, -2, 5}, {2, 1, 1}}, deltas)
	require.Panics(t, func() { s.Add("x", 1) }, "one delta per column")
	s.Reset()
	require.Zero(t, s.Len())

	require.Contains(t, projection.NewSums[int64](pgx.Identifier{"hot"}, "k", "n").SQL(), "$1::bigint[]")
	require.Contains(t, projection.NewSums[int32](pgx.Identifier{"hot"}, "k", "n").SQL(), "$1::integer[]")
	require.Panics(t, func() { projection.NewSums[string](pgx.Identifier{"hot"}, "k") })
}
