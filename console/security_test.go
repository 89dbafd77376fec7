package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/console"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// client is a browser-like client of a console: a cookie jar, and the
// console's origin on its POSTs unless told otherwise.
type client struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newClient(t *testing.T, base string) *client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &client{t: t, base: base, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *client) do(method, path string, form url.Values, header ...string) (int, http.Header, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	require.NoError(c.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", c.base)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i+1] == "" {
			req.Header.Del(header[i])
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := c.c.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp.StatusCode, resp.Header, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func TestConsoleSecurity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewMigrated(t)
	n := &notes{}
	n.failing.Store(true)
	proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema, MaxAttempts: 1, RetryBackoff: time.Millisecond}, n)
	require.NoError(t, err)
	require.NoError(t, proc.Setup(ctx))
	_, err = proc.Process(ctx, projection.Batch{Events: []aggregate.Event{{Aggregate: "a1", Version: 1, Type: "t", Data: []byte(`{"body":"fail secret-payload"}`)}}})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/console/", console.New(proc, &console.Options{Token: "rt", AdminToken: "at"}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	t.Run("pages need a login", func(t *testing.T) {
		c := newClient(t, srv.URL)
		status, hdr, _ := c.do(http.MethodGet, "/console/quarantine", nil)
		require.Equal(t, http.StatusSeeOther, status)
		require.Contains(t, hdr.Get("Location"), "/console/login")
		status, hdr, body := c.do(http.MethodGet, "/console/login", nil)
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, hdr.Get("Content-Security-Policy"), "script-src 'self'")
		require.Equal(t, "DENY", hdr.Get("X-Frame-Options"))
		require.NotContains(t, body, "<script>", "no inline script")
		status, _, _ = c.do(http.MethodPost, "/console/login", url.Values{"token": {"wrong"}})
		require.Equal(t, http.StatusUnauthorized, status)
		status, _, _ = c.do(http.MethodPost, "/console/login", url.Values{"admin_token": {"rt"}, "name": {"x"}})
		require.Equal(t, http.StatusUnauthorized, status, "the read token is not the admin token")
	})

	t.Run("a reader reads, masked, and cannot act", func(t *testing.T) {
		c := newClient(t, srv.URL)
		status, _, _ := c.do(http.MethodPost, "/console/login", url.Values{"token": {"rt"}})
		require.Equal(t, http.StatusSeeOther, status)
		status, _, body := c.do(http.MethodGet, "/console/quarantine", nil)
		require.Equal(t, http.StatusOK, status)
		require.Contains(t, body, "a1")
		require.NotContains(t, body, "secret-payload", "payloads are masked")
		require.Contains(t, body, "read-only")
		require.NotContains(t, body, "actions/retry")
		status, _, _ = c.do(http.MethodPost, "/console/actions/retry", url.Values{"projection": {"notes"}, "aggregate": {"a1"}, "confirm": {"1"}})
		require.Equal(t, http.StatusForbidden, status)
	})

	t.Run("an admin acts from the same origin, with the form token", func(t *testing.T) {
		c := newClient(t, srv.URL)
		status, _, _ := c.do(http.MethodPost, "/console/login", url.Values{"admin_token": {"at"}, "name": {"carol"}})
		require.Equal(t, http.StatusSeeOther, status)
		_, _, body := c.do(http.MethodGet, "/console/quarantine", nil)
		m := csrfRE.FindStringSubmatch(body)
		require.NotNil(t, m, body)
		form := url.Values{"projection": {"notes"}, "aggregate": {"a1"}, "csrf": {m[1]}, "confirm": {"1"}}
		status, _, _ = c.do(http.MethodPost, "/console/actions/retry", form, "Origin", "http://evil.example")
		require.Equal(t, http.StatusForbidden, status, "cross-origin")
		status, _, _ = c.do(http.MethodPost, "/console/actions/retry", form, "Origin", "", "Sec-Fetch-Site", "cross-site")
		require.Equal(t, http.StatusForbidden, status, "cross-site without Origin")
		noToken := url.Values{"projection": {"notes"}, "aggregate": {"a1"}, "confirm": {"1"}}
		status, _, _ = c.do(http.MethodPost, "/console/actions/retry", noToken)
		require.Equal(t, http.StatusForbidden, status, "no form token")
		var q int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM quarantine`).Scan(&q))
		require.Equal(t, int64(1), q, "nothing was done")
		n.failing.Store(false)
		status, _, body = c.do(http.MethodPost, "/console/actions/retry", form)
		require.Equal(t, http.StatusOK, status, body)
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM quarantine`).Scan(&q))
		require.Zero(t, q)
	})
}
