package pgtest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/migrations"
)

// RollbackToOffline migrates m's schema, then rolls it back to just before
// the newest offline migration, and returns that migration's version: a
// schema with an offline migration pending.
func RollbackToOffline(t testing.TB, m *migrations.Migrator) int {
	t.Helper()
	ctx := context.Background()
	_, err := m.Migrate(ctx)
	require.NoError(t, err)
	st, err := m.Status(ctx)
	require.NoError(t, err)
	offline := 0
	for _, s := range st {
		if !s.Online {
			offline = s.Version
		}
	}
	require.NotZero(t, offline, "some migration is offline")
	_, err = m.Rollback(ctx, len(st)-offline+1)
	require.NoError(t, err)
	return offline
}
