package console_test

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/console"
	"github.com/inorder/inorder/httpapi"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// BenchmarkConsolePages measures the console's pages and /v1/status on a
// schema of the size issue 26 names — 1M version rows, 100k parked events,
// 10k quarantined — and reports p50 and p99 per page. Seeding takes about
// half a minute, so it runs only with INORDER_BENCH_CONSOLE=1:
//
//	INORDER_BENCH_CONSOLE=1 go test -run '^$' -bench BenchmarkConsolePages -benchtime 200x ./console/
func BenchmarkConsolePages(b *testing.B) {
	if os.Getenv("INORDER_BENCH_CONSOLE") != "1" {
		b.Skip("set INORDER_BENCH_CONSOLE=1: it seeds 1M version rows")
	}
	ctx := context.Background()
	db := pgtest.NewMigrated(b)
	n := &notes{}
	proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema}, n)
	require.NoError(b, err)
	require.NoError(b, proc.Setup(ctx))
	for _, sql := range []string{
		`INSERT INTO versions (projection, aggregate, version) SELECT 'notes', 'a' || lpad(g::text, 7, '0'), 1 + g % 9 FROM generate_series(1, 1000000) g`,
		`INSERT INTO parked (projection, aggregate, version, event_id, hash, type, data, parked_at)
		 SELECT 'notes', 'a' || lpad((g / 10)::text, 7, '0'), 20 + g % 10, 'e' || g, '\x00', 'note.written', '{"body":"x"}', now() - (g || ' s')::interval
		 FROM generate_series(1, 100000) g`,
		`UPDATE versions SET parked = 10 WHERE projection = 'notes' AND aggregate IN (SELECT DISTINCT aggregate FROM parked)`,
		`INSERT INTO quarantine (projection, aggregate, version, event_id, hash, type, data, error, quarantined_at)
		 SELECT 'notes', 'a' || lpad((200000 + g)::text, 7, '0'), 10, 'q' || g, '\x00', 'note.written', '{"body":"x"}', 'boom', now() - (g || ' s')::interval
		 FROM generate_series(1, 10000) g`,
		`UPDATE versions SET blocked = true WHERE projection = 'notes' AND aggregate IN (SELECT aggregate FROM quarantine)`,
		`INSERT INTO rejected (fingerprint, aggregate, version, type, reason, error) SELECT sha256(g::text::bytea), 'r' || g, 1, 't', 'invalid_json', 'bad' FROM generate_series(1, 1000) g`,
		`ANALYZE`,
	} {
		_, err := db.Pool.Exec(ctx, sql)
		require.NoError(b, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/console/", console.New(proc, &console.Options{Token: "rt"}))
	mux.Handle("/", httpapi.New(proc, &httpapi.Options{Token: "rt"}))
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/console/login", strings.NewReader(url.Values{"token": {"rt"}}.Encode()))
	require.NoError(b, err)
	req.Header.Set("Origin", srv.URL)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	require.NoError(b, err)
	resp.Body.Close()
	require.Equal(b, http.StatusSeeOther, resp.StatusCode, "login")
	get := func(path string) time.Duration {
		start := time.Now()
		r, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		r.Header.Set("Authorization", "Bearer rt")
		resp, err := c.Do(r)
		require.NoError(b, err)
		resp.Body.Close()
		require.Equal(b, http.StatusOK, resp.StatusCode, path)
		return time.Since(start)
	}
	// /v1/status before and after its totals were cached: the processor's
	// Status as it read them on every call, and as /v1/status reads them
	// now, interleaved so that the machine's load hits both alike.
	b.Run("status-totals-now-vs-cached", func(b *testing.B) {
		var now, cached []time.Duration
		for b.Loop() {
			s := time.Now()
			_, err := proc.Status(ctx, nil)
			require.NoError(b, err)
			now = append(now, time.Since(s))
			s = time.Now()
			_, err = proc.Status(ctx, &projection.StatusOptions{TotalsMaxAge: projection.DefaultTotalsMaxAge})
			require.NoError(b, err)
			cached = append(cached, time.Since(s))
		}
		slices.Sort(now)
		slices.Sort(cached)
		b.ReportMetric(float64(now[len(now)/2].Microseconds())/1000, "now-p50-ms")
		b.ReportMetric(float64(cached[len(cached)/2].Microseconds())/1000, "cached-p50-ms")
	})
	for _, p := range []string{"/console/", "/console/quarantine?projection=notes", "/console/parked?projection=notes",
		"/console/rejected?open=1", "/console/conflicts", "/console/log", "/console/aggregate?projection=notes&id=a0000042",
		"/console/rebuilds?projection=notes", "/v1/status"} {
		b.Run(p, func(b *testing.B) {
			get(p) // warm: the overview reads its totals once in line
			ds := make([]time.Duration, 0, b.N)
			for b.Loop() {
				ds = append(ds, get(p))
			}
			slices.Sort(ds)
			q := func(f float64) float64 {
				return float64(ds[min(len(ds)-1, int(f*float64(len(ds))))].Microseconds()) / 1000
			}
			b.ReportMetric(q(0.5), "p50-ms")
			b.ReportMetric(q(0.99), "p99-ms")
		})
	}
}
