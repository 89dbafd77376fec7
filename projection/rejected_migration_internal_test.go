package projection

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/migrations"
)

// TestRejectedMigration: migration 007 gives the rejected rows written
// before it the fingerprints the processor computes now (the SQL and Go
// hashes agree, raw bytes and content types included), merges the rows
// that were one bad event delivered by several paths, and keeps what was
// replayed resolved.
func TestRejectedMigration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewMigrated(t)
	m, err := migrations.New(db.Pool, &migrations.Options{Schema: db.Schema})
	require.NoError(t, err)
	st, err := m.Status(ctx)
	require.NoError(t, err)
	after := 0 // the migrations from 007 on
	for _, s := range st {
		if s.Version >= 7 && s.Applied {
			after++
		}
	}
	_, err = m.Rollback(ctx, after) // back to 006
	require.NoError(t, err)

	tbl := pgx.Identifier{db.Schema, "rejected"}.Sanitize()
	insert := func(fp, source, id, agg string, version int64, typ string, data []byte, rawAgg []byte, errText string, replayed bool) {
		t.Helper()
		_, err := db.Pool.Exec(ctx, `INSERT INTO `+tbl+` (fingerprint, source, event_id, aggregate, version, type, data, reason, error,
  raw_aggregate, replayed_at) VALUES ($1, $2, $3, $4, $5, $6, $7, 'invalid_json', $8, $9, CASE WHEN $10 THEN now() END)`,
			[]byte(fp), source, id, agg, version, typ, data, errText, rawAgg, replayed)
		require.NoError(t, err)
	}
	bin := []byte{0xde, 0xad}
	ct := "invalid event: content type application/octet-stream is not JSON"
	// One binary event: by the worker, by a repair, by a replay.
	insert("a", "esdb", "id-1", "z1", 2, "payment.captured", bin, nil, ct, false)
	insert("b", "repair", "id-1", "z1", 2, "payment.captured", bin, nil, ct, false)
	insert("c", "esdb", "id-1", "z1", 2, "payment.captured", bin, nil, "invalid event: data is not valid JSON", true)
	// Another one, with an aggregate id PostgreSQL text cannot hold.
	insert("d", "esdb", "", `pay\x00nul`, 1, "t", []byte(`{`), []byte("pay\x00nul"), "invalid event: data is not valid JSON", false)

	_, err = m.Migrate(ctx)
	require.NoError(t, err)
	rows, err := db.Pool.Query(ctx, `SELECT fingerprint, count, content_type, resolved_at IS NOT NULL, resolution FROM `+tbl+` ORDER BY id`)
	require.NoError(t, err)
	type row struct {
		fp         []byte
		count      int64
		ct         string
		resolved   bool
		resolution string
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.fp, &x.count, &x.ct, &x.resolved, &x.resolution)
	})
	require.NoError(t, err)
	require.Len(t, got, 3, "the worker's and the repair's rows merged; the replay's knew no content type")
	require.Equal(t, rejectedFingerprint(aggregate.Event{ID: "id-1", Aggregate: "z1", Version: 2, Type: "payment.captured", Data: bin,
		ContentType: "application/octet-stream"}), got[0].fp, "the SQL hash is the processor's")
	require.Equal(t, row{got[0].fp, 2, "application/octet-stream", false, ""}, got[0])
	require.Equal(t, rejectedFingerprint(aggregate.Event{ID: "id-1", Aggregate: "z1", Version: 2, Type: "payment.captured", Data: bin}), got[1].fp)
	require.Equal(t, row{got[1].fp, 1, "", true, "replayed"}, got[1])
	require.Equal(t, rejectedFingerprint(aggregate.Event{Aggregate: "pay\x00nul", Version: 1, Type: "t", Data: []byte(`{`)}), got[2].fp,
		"raw bytes hashed as delivered")
}
