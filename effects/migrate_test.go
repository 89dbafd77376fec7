package effects_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/pgtest"
)

// TestMigrateRiver: River's migrations go to the schema asked for, from
// several callers at once; a dry run changes nothing; CheckRiver tells a
// migrated schema from one that is not.
func TestMigrateRiver(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	schema := db.Schema + "_river"
	t.Cleanup(func() {
		_, err := db.Pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
		require.NoError(t, err)
	})

	err := effects.CheckRiver(ctx, db.Pool, schema)
	require.ErrorIs(t, err, effects.ErrRiverNotMigrated)
	dry, err := effects.MigrateRiver(ctx, db.Pool, &effects.RiverMigrateOptions{Schema: schema, DryRun: true})
	require.NoError(t, err)
	require.NotEmpty(t, dry)
	var exists bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists))
	require.False(t, exists, "a dry run creates nothing")

	applied := make([][]int, 3)
	atOnce(t, 3, func(i int) error {
		var err error
		applied[i], err = effects.MigrateRiver(ctx, db.Pool, &effects.RiverMigrateOptions{Schema: schema})
		return err
	})
	var total []int
	for _, a := range applied {
		total = append(total, a...)
	}
	require.Equal(t, dry, total, "each migration applied once, by one of the callers")
	require.NoError(t, effects.CheckRiver(ctx, db.Pool, schema))
	ms, err := effects.RiverMigrations(ctx, db.Pool, schema)
	require.NoError(t, err)
	require.Len(t, ms, len(dry))
	for _, m := range ms {
		require.True(t, m.Applied, "migration %d", m.Version)
	}
	var jobs bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema+".river_job").Scan(&jobs))
	require.True(t, jobs)

	_, err = effects.MigrateRiver(ctx, db.Pool, &effects.RiverMigrateOptions{Schema: "bad-name"})
	require.ErrorContains(t, err, "letters, digits and underscores")
}

// TestMetrics: the gauges follow the effects table, the counters the
// process's attempts.
func TestMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, b.fx.RegisterMetrics(reg))
	keys := b.record(t, intent(t, kindNotify, "a"), intent(t, kindNotify, "b"), intent(t, kindChecked, "c"))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP inorder_effects_intents Open effect intents by kind and state (pending, running, retrying, failed).
# TYPE inorder_effects_intents gauge
inorder_effects_intents{kind="notify",state="failed"} 0
inorder_effects_intents{kind="notify",state="pending"} 2
inorder_effects_intents{kind="notify",state="retrying"} 0
inorder_effects_intents{kind="notify",state="running"} 0
inorder_effects_intents{kind="notify.checked",state="failed"} 0
inorder_effects_intents{kind="notify.checked",state="pending"} 1
inorder_effects_intents{kind="notify.checked",state="retrying"} 0
inorder_effects_intents{kind="notify.checked",state="running"} 0
# HELP inorder_effects_status_up 1 when the last read of the effects table succeeded, else 0.
# TYPE inorder_effects_status_up gauge
inorder_effects_status_up 1
`), "inorder_effects_intents", "inorder_effects_status_up"))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "inorder_effects_oldest_pending_age_seconds" {
			for _, m := range mf.GetMetric() {
				require.Positive(t, m.GetGauge().GetValue())
			}
		}
	}

	b.plain.setScript(func(string, int) reply { return reply{status: 422} })
	b.start(t)
	b.waitState(t, keys[0], effects.Done)
	b.waitState(t, keys[1], effects.Done)
	b.waitState(t, keys[2], effects.Failed)
	// The counters count an attempt before OnAttempt reports it (and after
	// its outcome is in the table).
	b.seen.wait(t, "the three attempts reported", func() bool {
		return len(b.seen.of(keys[0])) == 1 && len(b.seen.of(keys[1])) == 1 && len(b.seen.of(keys[2])) == 1
	})
	reg2 := prometheus.NewPedanticRegistry()
	require.NoError(t, b.fx.RegisterMetrics(reg2))
	require.NoError(t, testutil.GatherAndCompare(reg2, strings.NewReader(`
# HELP inorder_effects_attempts_total Effect attempts made by this process, by kind and outcome (done, retrying, failed, unrecorded).
# TYPE inorder_effects_attempts_total counter
inorder_effects_attempts_total{kind="notify",outcome="done"} 2
inorder_effects_attempts_total{kind="notify.checked",outcome="failed"} 1
# HELP inorder_effects_intents Open effect intents by kind and state (pending, running, retrying, failed).
# TYPE inorder_effects_intents gauge
inorder_effects_intents{kind="notify",state="failed"} 0
inorder_effects_intents{kind="notify",state="pending"} 0
inorder_effects_intents{kind="notify",state="retrying"} 0
inorder_effects_intents{kind="notify",state="running"} 0
inorder_effects_intents{kind="notify.checked",state="failed"} 1
inorder_effects_intents{kind="notify.checked",state="pending"} 0
inorder_effects_intents{kind="notify.checked",state="retrying"} 0
inorder_effects_intents{kind="notify.checked",state="running"} 0
`), "inorder_effects_attempts_total", "inorder_effects_intents"))
}

// TestBind: projections that implement Binder get the client.
func TestBind(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var got *effects.Client
	withBinder := binderFunc(func(c *effects.Client) { got = c })
	require.Equal(t, 1, effects.Bind(b.fx, any(b.notifier), any(withBinder)))
	require.Same(t, b.fx, got)
}

type binderFunc func(*effects.Client)

func (f binderFunc) UseEffects(c *effects.Client) { f(c) }
