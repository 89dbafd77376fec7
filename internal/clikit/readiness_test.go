package clikit_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/clikit"
	"github.com/inorder/inorder/internal/pgtest"
)

func TestReadiness(t *testing.T) {
	t.Parallel()
	db := pgtest.NewMigrated(t)
	probe := func(r *clikit.Readiness) (int, string) {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		var body struct {
			Status string `json:"status"`
			Error  struct{ Code, Message string }
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
		return rec.Code, body.Status + body.Error.Message
	}

	r := clikit.NewReadiness(db.Pool, db.Schema)
	code, msg := probe(r)
	require.Equal(t, http.StatusOK, code, msg)
	require.Equal(t, "ready", msg)

	r.Set(false, "draining")
	code, msg = probe(r)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "draining", msg)
	r.Set(true, "")

	// The lag hook: over the threshold is not ready; unknown lag is.
	lag, known := 10*time.Second, true
	r.MaxLag = 5 * time.Second
	r.Lag = func() (time.Duration, bool) { return lag, known }
	code, msg = probe(r)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "lag 10s exceeds --ready-max-lag 5s", msg)
	lag = time.Second
	code, _ = probe(r)
	require.Equal(t, http.StatusOK, code)
	lag, known = time.Hour, false
	code, _ = probe(r)
	require.Equal(t, http.StatusOK, code, "no lag known yet")

	code, msg = probe(clikit.NewReadiness(db.Pool, db.Schema+"_nope"))
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, `schema "`+db.Schema+`_nope" does not exist`, msg)

	_, err := db.Pool.Exec(t.Context(), `DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations)`)
	require.NoError(t, err)
	code, msg = probe(clikit.NewReadiness(db.Pool, db.Schema))
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, msg, "has 1 pending migrations")
}
