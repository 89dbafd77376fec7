package migrations_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/migrations"
)

// TestPresenceCloseWithdrawsAtOnce checks that a migrator sees no worker
// as soon as the only announcement's Close returns. Closing a connection
// alone releases its session's advisory locks only when the server's
// backend exits, a moment after the client is gone: a migrator looking in
// between counted a worker that had stopped, and a process that stopped
// its workers and then migrated was refused (seen about once in ten
// tries of Setup right after Close). Close releases the lock first.
func TestPresenceCloseWithdrawsAtOnce(t *testing.T) {
	t.Parallel()
	ctx, db, m := setup(t)
	for i := range 40 {
		p, err := migrations.Announce(ctx, db.Pool, db.Schema, nil)
		require.NoError(t, err)
		workers, err := m.Workers(ctx)
		require.NoError(t, err)
		require.Len(t, workers, 1, "try %d: the announcement", i)
		p.Close()
		workers, err = m.Workers(ctx)
		require.NoError(t, err)
		require.Empty(t, workers, "try %d: a worker is still seen right after Close", i)
	}
}
