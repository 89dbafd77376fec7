package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/httpapi"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// flaky fails every event while failing is set.
type flaky struct{ failing atomic.Bool }

func (*flaky) Name() string { return "flaky" }
func (f *flaky) Apply(context.Context, *projection.Tx, aggregate.Event) error {
	if f.failing.Load() {
		return errors.New("flaky: down")
	}
	return nil
}

// actionResult is the part of an action's answer the tests read.
type actionResult struct {
	Action    string    `json:"action"`
	DryRun    bool      `json:"dry_run"`
	Message   string    `json:"message"`
	Matched   int64     `json:"matched"`
	Items     []any     `json:"items"`
	AsOf      time.Time `json:"as_of"`
	Done      int64     `json:"done"`
	Failed    int64     `json:"failed"`
	Remaining int64     `json:"remaining"`
}

func TestActions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewMigrated(t)
	f := &flaky{}
	f.failing.Store(true)
	proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema, MaxAttempts: 1, RetryBackoff: time.Millisecond}, f)
	require.NoError(t, err)
	for i := range 5 {
		_, err := proc.Process(ctx, projection.Batch{Events: []aggregate.Event{{Aggregate: fmt.Sprintf("a%d", i), Version: 1, Type: "t", Data: []byte(`{}`)}}})
		require.NoError(t, err)
	}
	quarantined := func() (n int64) {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM quarantine`).Scan(&n))
		return n
	}
	require.Equal(t, int64(5), quarantined())

	const read, admin = "read-secret", "admin-secret"
	srv := httptest.NewServer(httpapi.New(proc, &httpapi.Options{Token: read, AdminToken: admin}))
	t.Cleanup(srv.Close)
	b := &bundle{srv: srv}
	post := func(path, body string, header ...string) response {
		return b.do(t, http.MethodPost, path, strings.NewReader(body), append([]string{"Content-Type", "application/json"}, header...)...)
	}
	asAdmin := []string{"Authorization", "Bearer " + admin}

	t.Run("tokens", func(t *testing.T) {
		requireError(t, post("/v1/actions/retry", `{}`), http.StatusUnauthorized, httpapi.CodeUnauthorized)
		requireError(t, post("/v1/actions/retry", `{}`, "Authorization", "Bearer "+read), http.StatusUnauthorized, httpapi.CodeUnauthorized)
		requireError(t, post("/v1/actions/retry?token="+admin, `{}`), http.StatusUnauthorized, httpapi.CodeUnauthorized)
		// The admin token is for actions only: reads keep the read token.
		requireError(t, b.get(t, "/v1/status", asAdmin...), http.StatusUnauthorized, httpapi.CodeUnauthorized)
		requireError(t, b.get(t, "/v1/actions/retry", asAdmin...), http.StatusMethodNotAllowed, httpapi.CodeMethodNotAllowed)
		off := httptest.NewServer(httpapi.New(proc, &httpapi.Options{Token: read}))
		defer off.Close()
		ob := &bundle{srv: off}
		requireError(t, ob.do(t, http.MethodPost, "/v1/actions/retry", strings.NewReader(`{}`), "Authorization", "Bearer "+read),
			http.StatusForbidden, httpapi.CodeForbidden)
	})

	t.Run("bad requests", func(t *testing.T) {
		requireError(t, post("/v1/actions/bogus", `{}`, asAdmin...), http.StatusBadRequest, httpapi.CodeBadRequest)
		requireError(t, post("/v1/actions/retry", `{"projection":"flaky"}`, asAdmin...), http.StatusBadRequest, httpapi.CodeBadRequest)
		requireError(t, post("/v1/actions/retry", `{"projection":"flaky","aggregate":"a0","extra":1}`, asAdmin...), http.StatusBadRequest, httpapi.CodeBadRequest)
		requireError(t, post("/v1/actions/skip", `{"projection":"flaky","aggregate":"a0"}`, asAdmin...), http.StatusBadRequest, httpapi.CodeBadRequest)
		requireError(t, post("/v1/actions/retry", `{"projection":"nope","aggregate":"a0"}`, asAdmin...), http.StatusNotFound, httpapi.CodeUnknownProjection)
		requireError(t, post("/v1/actions/retry", `{"projection":"flaky","aggregate":"zz"}`, asAdmin...), http.StatusConflict, httpapi.CodeConflict)
		// No source in this server: repairs and rebuilds are refused, and say why.
		requireError(t, post("/v1/actions/repair", `{"projection":"flaky"}`, asAdmin...), http.StatusNotImplemented, httpapi.CodeNotImplemented)
		requireError(t, post("/v1/actions/rebuild-start", `{"projection":"flaky"}`, asAdmin...), http.StatusNotImplemented, httpapi.CodeNotImplemented)
	})

	t.Run("retry: dry run, then confirmed", func(t *testing.T) {
		f.failing.Store(false)
		pre := requireJSON[actionResult](t, post("/v1/actions/retry", `{"projection":"flaky","aggregate":"a0"}`, asAdmin...))
		require.True(t, pre.DryRun)
		require.Equal(t, int64(1), pre.Matched)
		require.Len(t, pre.Items, 1)
		require.Contains(t, pre.Message, "would apply version 1")
		require.Equal(t, int64(5), quarantined(), "a dry run changes nothing")
		res := requireJSON[actionResult](t, post("/v1/actions/retry", `{"projection":"flaky","aggregate":"a0","confirm":true}`, asAdmin...))
		require.False(t, res.DryRun)
		require.Equal(t, int64(1), res.Done)
		require.Equal(t, int64(4), quarantined())
	})

	t.Run("bulk skip keeps its filter and its count", func(t *testing.T) {
		pre := requireJSON[actionResult](t, post("/v1/actions/bulk-skip", `{"projection":"flaky","reason":"bad data","actor":"bob"}`, asAdmin...))
		require.True(t, pre.DryRun)
		require.Equal(t, int64(4), pre.Matched)
		require.False(t, pre.AsOf.IsZero())
		require.Equal(t, int64(4), quarantined())
		confirm := func(expect int64) response {
			body, err := json.Marshal(map[string]any{"projection": "flaky", "reason": "bad data", "actor": "bob", "confirm": true,
				"as_of": pre.AsOf, "expect": expect})
			require.NoError(t, err)
			return post("/v1/actions/bulk-skip", string(body), asAdmin...)
		}
		requireError(t, confirm(3), http.StatusConflict, httpapi.CodeConflict)
		require.Equal(t, int64(4), quarantined(), "a confirmation that matches more than its preview does nothing")
		// Without the preview's bound, nothing happens either.
		requireError(t, post("/v1/actions/bulk-skip", `{"projection":"flaky","reason":"x","confirm":true}`, asAdmin...), http.StatusBadRequest, httpapi.CodeBadRequest)
		res := requireJSON[actionResult](t, confirm(4))
		require.Equal(t, int64(4), res.Done)
		require.Zero(t, res.Failed)
		require.Zero(t, res.Remaining)
		require.Zero(t, quarantined())
		var n int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM operator_log WHERE action = 'skip' AND actor = 'http:bob' AND reason = 'bad data'`).Scan(&n))
		require.Equal(t, int64(4), n)
	})
}
