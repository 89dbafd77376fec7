package projection_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/migrations"
	"github.com/inorder/inorder/projection"
)

// requireMigrated checks that schema has every migration of the binary
// applied and holds inorder's tables.
func requireMigrated(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	ctx := context.Background()
	m, err := migrations.New(pool, &migrations.Options{Schema: schema})
	require.NoError(t, err)
	status, err := m.Status(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, status)
	for _, s := range status {
		require.True(t, s.Applied, "migration %03d_%s", s.Version, s.Name)
		require.False(t, s.Unknown, "migration %03d_%s", s.Version, s.Name)
	}
	for _, table := range []string{"versions", "parked", "conflicts", "quarantine", "rejected", "checkpoints", "generations"} {
		var exists bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{schema, table}.Sanitize()).Scan(&exists))
		require.True(t, exists, "table %s.%s", schema, table)
	}
}

// TestSetupMigrates checks that Setup is the one call a processor needs:
// on a fresh schema it applies inorder's migrations, then creates the
// projections' tables, and calling it again, or from two processors at
// once, changes nothing and fails in none.
func TestSetupMigrates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// schema returns the Config.Schema of the processors.
		schema func(t *testing.T, db *pgtest.DB) string
	}{
		{name: "empty schema", schema: func(_ *testing.T, db *pgtest.DB) string { return db.Schema }},
		{name: "missing schema", schema: func(t *testing.T, db *pgtest.DB) string {
			schema := db.Schema + "_gate"
			t.Cleanup(func() {
				_, err := db.Pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
				require.NoError(t, err)
			})
			return schema
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := pgtest.New(t) // no migration applied
			schema := tc.schema(t, db)
			var applied int
			require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1", schema).Scan(&applied))
			require.Zero(t, applied, "tables in the fresh schema")

			procs := make([]*projection.Processor, 2)
			for i := range procs {
				p, err := projection.New(db.Pool, &projection.Config{Schema: schema}, ledger.New(nil))
				require.NoError(t, err)
				procs[i] = p
			}
			errs := make([]error, len(procs))
			var wg sync.WaitGroup
			for i, p := range procs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = p.Setup(ctx)
				}()
			}
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "processor %d", i)
			}
			requireMigrated(t, db.Pool, schema)

			// Again, once inorder's schema and the read model exist.
			for _, p := range procs {
				require.NoError(t, p.Setup(ctx))
			}
			requireMigrated(t, db.Pool, schema)

			// The gate and the ledger's tables work.
			e, err := aggregate.New("pay-1", 1, ledger.Authorized, ledger.Data{Payer: "alice", Payee: "shop", Amount: 1000})
			require.NoError(t, err)
			res, err := procs[1].Process(ctx, projection.Batch{Events: []aggregate.Event{e}})
			require.NoError(t, err)
			require.Equal(t, projection.Applied, res[0].Outcome)
			model, err := ledger.New(nil).Load(ctx, db.Pool)
			require.NoError(t, err)
			require.Equal(t, int64(1), model.Payments["pay-1"].Version)
		})
	}
}

// TestSetupRefusesOfflineMigrationWhileWorkersRun checks that Setup keeps
// the migrator's refusal: with an offline migration pending and another
// worker of the schema announced, it applies nothing and returns
// migrations.ErrWorkersConnected; once the worker is gone, it migrates.
func TestSetupRefusesOfflineMigrationWhileWorkersRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewMigrated(t)
	m, err := migrations.New(db.Pool, &migrations.Options{Schema: db.Schema})
	require.NoError(t, err)
	// Roll back to before the newest offline migration.
	newestOffline := pgtest.RollbackToOffline(t, m)

	presence, err := migrations.Announce(ctx, db.Pool, db.Schema, nil)
	require.NoError(t, err)
	defer presence.Close()
	proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema}, ledger.New(nil))
	require.NoError(t, err)
	err = proc.Setup(ctx)
	require.ErrorIs(t, err, migrations.ErrWorkersConnected)
	var offline *migrations.OfflineError
	require.ErrorAs(t, err, &offline)
	require.Equal(t, newestOffline, offline.Offline[0].Version)
	require.Len(t, offline.Workers, 1)
	after, err := m.Status(ctx)
	require.NoError(t, err)
	require.False(t, after[newestOffline-1].Applied, "nothing applied")
	var ledgerTable bool
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT to_regclass('ledger_payments') IS NOT NULL").Scan(&ledgerTable))
	require.False(t, ledgerTable, "the projection's Setup ran after a refused migration")

	presence.Close()
	require.NoError(t, proc.Setup(ctx))
	requireMigrated(t, db.Pool, db.Schema)
}
