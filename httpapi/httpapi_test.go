package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/httpapi"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// plain is a projection that does not implement projection.Reader.
type plain struct{}

func (plain) Name() string { return "plain" }
func (plain) Apply(context.Context, *projection.Tx, aggregate.Event) error {
	return nil
}

type bundle struct {
	db     *pgtest.DB
	proc   *projection.Processor
	h      http.Handler
	srv    *httptest.Server
	events []aggregate.Event
	want   *ledger.Model
}

// setup returns an API over a ledger fed 20 payments of 4 versions and a
// projection without a Reader. hook, if set, runs on the handler before the
// server starts.
func setup(t *testing.T, opts *httpapi.Options, hook func(http.Handler)) *bundle {
	t.Helper()
	db, proc, events, want := ledgertest.Fed(t, projection.Config{RetryBackoff: time.Millisecond}, rand.New(rand.NewPCG(11, 12)), 20, 4, ledger.New(nil), plain{})
	h := httpapi.New(proc, opts)
	if hook != nil {
		hook(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &bundle{db: db, proc: proc, h: h, srv: srv, events: events, want: want}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (b *bundle) do(t *testing.T, method, path string, body io.Reader, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, body)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := b.srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

func (b *bundle) get(t *testing.T, path string, header ...string) response {
	t.Helper()
	return b.do(t, http.MethodGet, path, nil, header...)
}

// leakTokens must never appear in a response (unless the request put them
// there).
var leakTokens = []string{"sql", "pg", "goroutine", ".go:", "panic", "syntax", "relation", "runtime."}

// requireError checks an error response: status, JSON shape, stable code,
// and nothing internal in it.
func requireError(t *testing.T, r response, status int, code string) httpapi.Error {
	t.Helper()
	require.Equal(t, status, r.status, "body: %s", r.body)
	require.Equal(t, "application/json; charset=utf-8", r.header.Get("Content-Type"))
	var eb httpapi.ErrorBody
	require.NoError(t, json.Unmarshal(r.body, &eb), "body: %s", r.body)
	require.Equal(t, code, eb.Error.Code, "body: %s", r.body)
	require.NotEmpty(t, eb.Error.Message)
	requireNoLeak(t, r.body, "")
	return eb.Error
}

func requireNoLeak(t *testing.T, body []byte, input string) {
	t.Helper()
	lower := strings.ToLower(string(body))
	for _, tok := range leakTokens {
		if strings.Contains(strings.ToLower(input), tok) {
			continue
		}
		require.NotContains(t, lower, tok, "body: %s", body)
	}
}

func requireJSON[T any](t *testing.T, r response) T {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	require.Equal(t, "application/json; charset=utf-8", r.header.Get("Content-Type"))
	var v T
	require.NoError(t, json.Unmarshal(r.body, &v), "body: %s", r.body)
	return v
}

// paymentView decodes an aggregate response's data as a ledger payment.
type aggregateResponse struct {
	Projection string             `json:"projection"`
	Aggregate  string             `json:"aggregate"`
	Version    int64              `json:"version"`
	Data       ledger.PaymentView `json:"data"`
}

type listResponse struct {
	Projection string                  `json:"projection"`
	Items      []ledger.PaymentSummary `json:"items"`
	Next       string                  `json:"next"`
}

func legsOf(m *ledger.Model, id string) []ledger.Leg {
	var out []ledger.Leg
	for _, l := range m.Legs {
		if l.Payment == id {
			out = append(out, l)
		}
	}
	return out
}

func TestRead(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	agg := "/v1/projections/ledger/aggregates/"

	t.Run("GetAggregate", func(t *testing.T) {
		t.Parallel()
		for _, id := range []string{"pay-000000", "pay-000007", "pay-000019"} {
			r := b.get(t, agg+id)
			got := requireJSON[aggregateResponse](t, r)
			require.Equal(t, "4", r.header.Get(httpapi.VersionHeader))
			require.Equal(t, "no-store", r.header.Get("Cache-Control"))
			require.Equal(t, "ledger", got.Projection)
			require.Equal(t, id, got.Aggregate)
			require.Equal(t, int64(4), got.Version)
			require.Equal(t, b.want.Payments[id], got.Data.Payment)
			require.Equal(t, legsOf(b.want, id), got.Data.Legs)
		}
	})

	t.Run("Head", func(t *testing.T) {
		t.Parallel()
		r := b.do(t, http.MethodHead, agg+"pay-000001", nil)
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, "4", r.header.Get(httpapi.VersionHeader))
		require.Empty(t, r.body)
	})

	t.Run("AggregateNotFound", func(t *testing.T) {
		t.Parallel()
		r := b.get(t, agg+"pay-999999")
		requireError(t, r, http.StatusNotFound, httpapi.CodeNotFound)
		require.Equal(t, "0", r.header.Get(httpapi.VersionHeader))
	})

	t.Run("UnknownProjection", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{
			"/v1/projections/nope",
			"/v1/projections/nope/aggregates",
			"/v1/projections/nope/aggregates/pay-000001",
			"/v1/projections/nope/aggregates/",
			"/v1/projections/Ledger/aggregates/pay-000001",
		} {
			requireError(t, b.get(t, path), http.StatusNotFound, httpapi.CodeUnknownProjection)
		}
	})

	t.Run("NoReader", func(t *testing.T) {
		t.Parallel()
		requireError(t, b.get(t, "/v1/projections/plain/aggregates/pay-000001"), http.StatusNotFound, httpapi.CodeNoReader)
		requireError(t, b.get(t, "/v1/projections/plain/aggregates"), http.StatusNotFound, httpapi.CodeNoReader)
	})

	t.Run("BadID", func(t *testing.T) {
		t.Parallel()
		for _, id := range []string{"", strings.Repeat("a", 513), "%FF", "pay%C3", "%00", "a%00b"} {
			requireError(t, b.get(t, agg+id), http.StatusBadRequest, httpapi.CodeBadRequest)
		}
		// The longest accepted id is only missing.
		requireError(t, b.get(t, agg+strings.Repeat("a", 512)), http.StatusNotFound, httpapi.CodeNotFound)
		// An escaped slash is part of the id.
		requireError(t, b.get(t, agg+"pay%2F000001"), http.StatusNotFound, httpapi.CodeNotFound)
	})

	t.Run("BadMinVersion", func(t *testing.T) {
		t.Parallel()
		for _, v := range []string{"-1", "abc", "1.5", "", "0x10", "9223372036854775808", "99999999999999999999999"} {
			requireError(t, b.get(t, agg+"pay-000001?min_version="+url.QueryEscape(v)), http.StatusBadRequest, httpapi.CodeBadMinVersion)
		}
	})

	t.Run("BadParameters", func(t *testing.T) {
		t.Parallel()
		for _, q := range []string{"timeout=0", "timeout=-1s", "timeout=soon", "timeout=1h", "timeout=5001ms", "foo=1",
			"min_version=1&min_version=2", "a=%zz", "a;b"} {
			requireError(t, b.get(t, agg+"pay-000001?"+q), http.StatusBadRequest, httpapi.CodeBadRequest)
		}
		e := requireError(t, b.get(t, agg+"pay-000001?min_version=1&timeout=1h"), http.StatusBadRequest, httpapi.CodeBadRequest)
		require.Contains(t, e.Message, "at most 5s", "it says the bound instead of shortening the wait")
		requireError(t, b.get(t, "/v1/status?verbose=1"), http.StatusBadRequest, httpapi.CodeBadRequest)
		requireError(t, b.get(t, "/v1/projections?x=1"), http.StatusBadRequest, httpapi.CodeBadRequest)
	})

	t.Run("MinVersionReached", func(t *testing.T) {
		t.Parallel()
		for _, v := range []string{"0", "1", "4"} {
			r := b.get(t, agg+"pay-000002?min_version="+v+"&timeout=50ms")
			require.Equal(t, int64(4), requireJSON[aggregateResponse](t, r).Version)
		}
	})

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		var ids []string
		after := ""
		for pages := 0; ; pages++ {
			require.Less(t, pages, 10)
			r := b.get(t, "/v1/projections/ledger/aggregates?limit=6&after="+url.QueryEscape(after))
			page := requireJSON[listResponse](t, r)
			require.Equal(t, "ledger", page.Projection)
			require.LessOrEqual(t, len(page.Items), 6)
			for _, it := range page.Items {
				require.Equal(t, b.want.Payments[it.ID], it.Payment)
				ids = append(ids, it.ID)
			}
			if page.Next == "" {
				break
			}
			after = page.Next
		}
		want := slices.Sorted(func(yield func(string) bool) {
			for id := range b.want.Payments {
				if !yield(id) {
					return
				}
			}
		})
		require.Equal(t, want, ids)

		// The default and the largest limit return everything here.
		for _, q := range []string{"", "?limit=500"} {
			page := requireJSON[listResponse](t, b.get(t, "/v1/projections/ledger/aggregates"+q))
			require.Len(t, page.Items, 20)
			require.Empty(t, page.Next)
		}
	})

	t.Run("ListFilters", func(t *testing.T) {
		t.Parallel()
		one := b.want.Payments["pay-000005"]
		for _, q := range []url.Values{
			{"status": {one.Status}},
			{"payer": {one.Payer}},
			{"payee": {one.Payee}, "status": {one.Status}},
			{"status": {"nothing-has-this"}},
		} {
			page := requireJSON[listResponse](t, b.get(t, "/v1/projections/ledger/aggregates?"+q.Encode()))
			var got, want []string
			for _, it := range page.Items {
				got = append(got, it.ID)
			}
			for id, pm := range b.want.Payments {
				f := map[string]string{"status": pm.Status, "payer": pm.Payer, "payee": pm.Payee}
				ok := true
				for k := range q {
					ok = ok && f[k] == q.Get(k)
				}
				if ok {
					want = append(want, id)
				}
			}
			slices.Sort(want)
			require.Equal(t, want, got, "query %s", q.Encode())
			if len(want) == 0 {
				require.NotNil(t, page.Items)
			}
		}
	})

	t.Run("ListBadParameters", func(t *testing.T) {
		t.Parallel()
		for _, q := range []string{"amount=5", "limit=0", "limit=-1", "limit=ten", "limit=", "limit=501", "limit=100000", "status=a&status=b",
			"after=%FF", "status=%00", "payer=" + strings.Repeat("x", 513)} {
			requireError(t, b.get(t, "/v1/projections/ledger/aggregates?"+q), http.StatusBadRequest, httpapi.CodeBadRequest)
		}
	})

	t.Run("Projections", func(t *testing.T) {
		t.Parallel()
		got := requireJSON[httpapi.ProjectionsResponse](t, b.get(t, "/v1/projections"))
		require.Len(t, got.Projections, 2)
		l, p := got.Projections[0], got.Projections[1]
		require.Equal(t, "ledger", l.Name)
		require.True(t, l.Readable)
		require.Equal(t, []string{"payee", "payer", "status"}, l.Filters)
		require.Equal(t, int64(20), l.Aggregates)
		require.Equal(t, int64(80), l.Events)
		require.Equal(t, "plain", p.Name)
		require.False(t, p.Readable)
		require.Equal(t, []string{}, p.Filters)

		one := requireJSON[httpapi.ProjectionInfo](t, b.get(t, "/v1/projections/ledger"))
		require.Equal(t, l, one)
	})

	t.Run("Methods", func(t *testing.T) {
		t.Parallel()
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions, "BREW"} {
			r := b.do(t, m, agg+"pay-000001", strings.NewReader("{}"))
			requireError(t, r, http.StatusMethodNotAllowed, httpapi.CodeMethodNotAllowed)
			require.Equal(t, "GET, HEAD", r.header.Get("Allow"))
		}
	})

	t.Run("Routes", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{"/", "/v2/status", "/v1/projections/ledger/other", "/v1/status/"} {
			requireError(t, b.get(t, path), http.StatusNotFound, httpapi.CodeNotFound)
		}
		for _, path := range []string{"/v1/projections/ledger/aggregates/../../status", "/v1//status", "/v1/./status"} {
			requireError(t, b.get(t, path), http.StatusBadRequest, httpapi.CodeBadRequest)
		}
	})

	t.Run("Health", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, map[string]string{"status": "ok"}, requireJSON[map[string]string](t, b.get(t, "/healthz")))
		require.Equal(t, map[string]string{"status": "ready"}, requireJSON[map[string]string](t, b.get(t, "/readyz")))
	})

	t.Run("Bodies", func(t *testing.T) {
		t.Parallel()
		big := bytes.Repeat([]byte("x"), 1<<20)
		// Announced with Content-Length: refused before reading.
		requireError(t, b.do(t, http.MethodGet, agg+"pay-000001", bytes.NewReader(big)), http.StatusRequestEntityTooLarge, httpapi.CodePayloadTooLarge)
		// Chunked, length unknown: refused once the limit is crossed.
		requireError(t, b.do(t, http.MethodGet, agg+"pay-000001", io.MultiReader(bytes.NewReader(big))), http.StatusRequestEntityTooLarge, httpapi.CodePayloadTooLarge)
		// A small body is drained and ignored.
		r := b.do(t, http.MethodGet, agg+"pay-000001", strings.NewReader("ignored"))
		require.Equal(t, int64(4), requireJSON[aggregateResponse](t, r).Version)
	})
}

func TestMinVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("WaitsForTheVersion", func(t *testing.T) {
		t.Parallel()
		waiting := make(chan struct{}, 1)
		b := setup(t, nil, func(h http.Handler) {
			httpapi.SetOnWait(h, func() {
				select {
				case waiting <- struct{}{}:
				default:
				}
			})
		})
		// pay-000003 is at version 4; versions 5 and 6 come once the request
		// waits.
		next := ledgerEvents(t, "pay-000003", 5, ledger.Refunded, ledger.Voided)
		processed := make(chan error, 1)
		go func() {
			<-waiting
			_, err := b.proc.Process(ctx, projection.Batch{Events: next})
			processed <- err
		}()
		r := b.get(t, "/v1/projections/ledger/aggregates/pay-000003?min_version=6&timeout=5s")
		require.NoError(t, <-processed)
		got := requireJSON[aggregateResponse](t, r)
		require.Equal(t, "6", r.header.Get(httpapi.VersionHeader))
		require.Equal(t, int64(6), got.Version)
		require.Equal(t, int64(6), got.Data.Version)
		require.Equal(t, "voided", got.Data.Status)
	})

	t.Run("TimesOutWithTheCurrentVersion", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &httpapi.Options{MaxWait: 200 * time.Millisecond}, nil)
		for _, tc := range []struct {
			id, query string
			current   int64
		}{
			{"pay-000004", "min_version=5&timeout=30ms", 4},
			{"pay-000004", "min_version=9223372036854775807", 4}, // bounded by MaxWait
			{"pay-000004", "min_version=5&timeout=200ms", 4},     // timeout = MaxWait
			{"pay-unknown", "min_version=1&timeout=10ms", 0},
		} {
			began := time.Now()
			r := b.get(t, "/v1/projections/ledger/aggregates/"+tc.id+"?"+tc.query)
			require.Less(t, time.Since(began), 5*time.Second)
			e := requireError(t, r, http.StatusGatewayTimeout, httpapi.CodeTimeout)
			require.NotNil(t, e.CurrentVersion)
			require.Equal(t, tc.current, *e.CurrentVersion)
			require.NotNil(t, e.MinVersion)
			require.Equal(t, strconv.FormatInt(tc.current, 10), r.header.Get(httpapi.VersionHeader))
		}
	})
}

// ledgerEvents returns events of the given types for a payment, from
// version from on.
func ledgerEvents(t *testing.T, id string, from int64, types ...string) []aggregate.Event {
	t.Helper()
	var out []aggregate.Event
	for i, typ := range types {
		e, err := aggregate.New(id, from+int64(i), typ, ledger.Data{Amount: 10})
		require.NoError(t, err)
		out = append(out, e)
	}
	return out
}

func TestStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil, nil)

	conflict, err := aggregate.New("pay-000000", 1, ledger.Authorized, ledger.Data{Payer: "x", Payee: "y", Amount: 1})
	require.NoError(t, err)
	parked, err := aggregate.New("pay-parked", 3, ledger.Approved, ledger.Data{})
	require.NoError(t, err)
	bad, err := aggregate.New("pay-bad", 1, ledger.Captured, ledger.Data{Amount: 5}) // a payment must start authorized
	require.NoError(t, err)
	invalid := aggregate.Event{Aggregate: "", Version: 1, Type: ledger.Approved, Data: []byte(`{}`)}
	_, err = b.proc.Process(ctx, projection.Batch{
		Events: []aggregate.Event{conflict, parked, bad, invalid},
		Source: "test",
		BeforeCommit: func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO checkpoints (name, position, updated_at)
VALUES ('esdb:$all', 'C:42/P:41', now() - interval '3 seconds')`)
			return err
		},
	})
	require.NoError(t, err)

	got := requireJSON[projection.Status](t, b.get(t, "/v1/status"))
	require.WithinDuration(t, time.Now(), got.Time, time.Minute)
	require.Len(t, got.Projections, 2)
	l, p := got.Projections[0], got.Projections[1]
	require.Equal(t, "ledger", l.Name)
	require.Equal(t, int64(1), l.Parked)
	require.Equal(t, int64(1), l.ParkedAggregates)
	require.False(t, l.OldestParked.IsZero())
	require.GreaterOrEqual(t, l.OldestParkedAgeSeconds, 0.0)
	require.Equal(t, int64(1), l.Quarantined)
	require.Equal(t, int64(1), l.Conflicts)
	require.Equal(t, "plain", p.Name)
	require.Equal(t, int64(0), p.Quarantined)
	require.Equal(t, int64(1), p.Conflicts)

	require.Len(t, got.Checkpoints, 1)
	require.Equal(t, "esdb:$all", got.Checkpoints[0].Name)
	require.Equal(t, "C:42/P:41", got.Checkpoints[0].Position.String())
	require.GreaterOrEqual(t, got.Checkpoints[0].AgeSeconds, 2.0)

	require.Len(t, got.Attention.Quarantined, 1)
	require.Equal(t, "pay-bad", got.Attention.Quarantined[0].Aggregate)
	require.Nil(t, got.Attention.Quarantined[0].Data, "status omits payloads")
	require.Len(t, got.Attention.Conflicts, 2)
	require.Equal(t, "pay-000000", got.Attention.Conflicts[0].Aggregate)
	require.Equal(t, int64(1), got.Rejected.Total)
	require.Equal(t, int64(1), got.Rejected.Pending)
	require.Len(t, got.Attention.Rejected, 1)
	require.Equal(t, "test", got.Attention.Rejected[0].Source)
}

func TestAuth(t *testing.T) {
	t.Parallel()
	b := setup(t, &httpapi.Options{Token: "s3cret-token"}, nil)
	path := "/v1/projections/ledger/aggregates/pay-000001"

	for _, hdr := range [][]string{
		nil,
		{"Authorization", "Bearer wrong"},
		{"Authorization", "Bearer s3cret-token2"},
		{"Authorization", "Bearer s3cret-toke"},
		{"Authorization", "Bearer "},
		{"Authorization", "Basic czNjcmV0LXRva2Vu"},
		{"Authorization", "s3cret-token"},
	} {
		for _, p := range []string{path, "/v1/status", "/v1/projections", "/nope"} {
			r := b.get(t, p, hdr...)
			requireError(t, r, http.StatusUnauthorized, httpapi.CodeUnauthorized)
			require.Equal(t, `Bearer realm="inorder"`, r.header.Get("WWW-Authenticate"))
		}
	}
	for _, hdr := range []string{"Bearer s3cret-token", "bearer s3cret-token"} {
		r := b.get(t, path, "Authorization", hdr)
		require.Equal(t, int64(4), requireJSON[aggregateResponse](t, r).Version)
	}
	// Probes need no token.
	requireJSON[map[string]string](t, b.get(t, "/healthz"))
	requireJSON[map[string]string](t, b.get(t, "/readyz"))
}

func TestReadyzDown(t *testing.T) {
	t.Parallel()
	db := pgtest.NewMigrated(t)
	pool, err := pgxpool.New(context.Background(), db.URL)
	require.NoError(t, err)
	proc, err := projection.New(pool, &projection.Config{Schema: db.Schema}, ledger.New(nil))
	require.NoError(t, err)
	pool.Close()
	h := httpapi.New(proc, nil)
	for _, path := range []string{"/readyz", "/v1/status", "/v1/projections/ledger/aggregates/pay-1", "/v1/projections/ledger/aggregates"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		r := response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
		require.GreaterOrEqual(t, r.status, 500, "%s: %s", path, r.body)
		var eb httpapi.ErrorBody
		require.NoError(t, json.Unmarshal(r.body, &eb))
		require.Contains(t, []string{httpapi.CodeUnavailable, httpapi.CodeInternal}, eb.Error.Code)
		requireNoLeak(t, r.body, "")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusOK, rec.Code)
}

func TestSlowClients(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	srv := httpapi.NewServer("127.0.0.1:0", b.h)
	require.Equal(t, httpapi.ServerReadHeaderTimeout, srv.ReadHeaderTimeout)
	srv.ReadHeaderTimeout = 200 * time.Millisecond
	srv.ReadTimeout = 400 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.ErrorIs(t, <-served, http.ErrServerClosed)
	})
	addr := ln.Addr().String()

	dial := func(t *testing.T) net.Conn {
		t.Helper()
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		return conn
	}

	t.Run("Normal", func(t *testing.T) {
		t.Parallel()
		resp, err := http.Get("http://" + addr + "/v1/projections/ledger/aggregates/pay-000001")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	})

	t.Run("SlowHeaders", func(t *testing.T) {
		t.Parallel()
		conn := dial(t)
		began := time.Now()
		_, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: inorder\r\n")
		require.NoError(t, err)
		// Never finish the headers: the server must hang up by itself.
		rest, err := io.ReadAll(conn)
		require.NoError(t, err)
		require.NotContains(t, string(rest), "200 OK")
		require.Less(t, time.Since(began), 5*time.Second)
	})

	t.Run("SlowBody", func(t *testing.T) {
		t.Parallel()
		conn := dial(t)
		began := time.Now()
		_, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: inorder\r\nContent-Length: 100\r\n\r\n0123456789")
		require.NoError(t, err)
		// The other 90 bytes never come.
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		requireError(t, response{status: resp.StatusCode, header: resp.Header, body: body}, http.StatusRequestTimeout, httpapi.CodeRequestTimeout)
		require.Less(t, time.Since(began), 5*time.Second)
	})
}

func TestHostileInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil, nil)
	tables := []string{"ledger_payments", "ledger_legs", "ledger_balances", "versions", "applied", "parked", "quarantine", "conflicts", "rejected"}
	counts := func() map[string]int64 {
		out := map[string]int64{}
		for _, tb := range tables {
			var n int64
			require.NoError(t, b.db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{tb}.Sanitize()).Scan(&n))
			out[tb] = n
		}
		return out
	}
	before := counts()
	require.Equal(t, int64(20), before["ledger_payments"])

	hostile := []string{
		"'; DROP TABLE ledger_payments; --",
		`" OR 1=1 --`,
		"pay-000001' OR '1'='1",
		"%00", "\x00", "a\x00b", "%", "%zz",
		"../../etc/passwd", "..", ".", "/", "?", "#", "&", "=",
		"ünïcødé ✓ 🎉", "\u202egnp.exe", "\xff\xfe", "\xc3",
		strings.Repeat("A", 5000), strings.Repeat("é", 300),
		"$1", "%s%n%x", "{{.}}", "<script>alert(1)</script>", "\r\nX-Injected: 1",
		"-1", "9223372036854775808", "1e9",
	}
	known := []string{httpapi.CodeBadRequest, httpapi.CodeBadMinVersion, httpapi.CodeNotFound, httpapi.CodeUnknownProjection, httpapi.CodeTimeout}
	for _, s := range hostile {
		pe, qe := url.PathEscape(s), url.QueryEscape(s)
		agg := "/v1/projections/ledger/aggregates"
		for _, path := range []string{
			"/v1/projections/" + pe,
			"/v1/projections/" + pe + "/aggregates",
			"/v1/projections/" + pe + "/aggregates/pay-000001",
			agg + "/" + pe,
			agg + "/" + pe + "?min_version=1&timeout=1ms",
			agg + "/pay-000001?min_version=" + qe,
			agg + "/pay-000001?timeout=" + qe,
			agg + "/pay-000001?" + qe + "=1",
			agg + "?status=" + qe,
			agg + "?payer=" + qe + "&payee=" + qe,
			agg + "?after=" + qe,
			agg + "?limit=" + qe,
			agg + "?" + qe + "=1",
			"/v1/status?" + qe,
		} {
			r := b.get(t, path)
			if r.status != http.StatusGatewayTimeout { // min_version=1 of a missing aggregate
				require.Less(t, r.status, 500, "%s: %s", path, r.body)
			}
			require.Equal(t, "application/json; charset=utf-8", r.header.Get("Content-Type"), path)
			require.True(t, json.Valid(r.body), "%s: %s", path, r.body)
			require.Empty(t, r.header.Get("X-Injected"))
			requireNoLeak(t, r.body, s)
			if r.status >= 400 {
				var eb httpapi.ErrorBody
				require.NoError(t, json.Unmarshal(r.body, &eb))
				require.Contains(t, known, eb.Error.Code, "%s: %s", path, r.body)
				if len(s) > 3 {
					require.NotContains(t, string(r.body), s, "an error echoes its input: %s", path)
				}
			}
		}
	}
	require.Equal(t, before, counts())
	// The read model is intact, not just present.
	got, err := ledger.New(nil).Load(ctx, b.db.Pool)
	require.NoError(t, err)
	require.Equal(t, b.want, got)
}

// fakeEffects is the effects of /v1/status in TestStatusEffects.
type fakeEffects struct {
	stats []effects.KindStats
	err   error
}

func (f fakeEffects) Stats(context.Context) ([]effects.KindStats, error) { return f.stats, f.err }

// TestStatusEffects: with Options.Effects, /v1/status carries the open
// intents per kind next to the gate's status; without, it has no "effects".
func TestStatusEffects(t *testing.T) {
	t.Parallel()
	oldest := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	stats := []effects.KindStats{{Kind: "webhook", Pending: 2, Running: 1, Retrying: 3, Failed: 4, Uncertain: 1, OldestPending: oldest}}
	b := setup(t, &httpapi.Options{Effects: fakeEffects{stats: stats}}, nil)
	got := requireJSON[httpapi.StatusResponse](t, b.get(t, "/v1/status"))
	require.Len(t, got.Projections, 2)
	require.Equal(t, stats, got.Effects)
	raw := b.get(t, "/v1/status")
	require.Contains(t, string(raw.body), `"effects":[{"kind":"webhook","pending":2,"running":1,"retrying":3,"failed":4,"uncertain":1,"orphaned":0,"oldest_pending":"2026-01-02T03:04:05Z"}]`)

	plain := setup(t, nil, nil)
	require.NotContains(t, string(plain.get(t, "/v1/status").body), `"effects"`)

	broken := setup(t, &httpapi.Options{Effects: fakeEffects{err: errors.New("effects table unreadable")}}, nil)
	require.Equal(t, http.StatusInternalServerError, broken.get(t, "/v1/status").status)
}

// TestHeaderLimit: a request whose headers are over ServerMaxHeaderBytes is
// answered 431 with the JSON error envelope, like every other error.
func TestHeaderLimit(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := httpapi.NewServer("", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	get := func(header int) response {
		req, err := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/v1/status", nil)
		require.NoError(t, err)
		req.Header.Set("X-Big", strings.Repeat("x", header))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return response{status: resp.StatusCode, header: resp.Header, body: body}
	}
	require.Equal(t, http.StatusNoContent, get(1000).status)
	requireError(t, get(httpapi.ServerMaxHeaderBytes), http.StatusRequestHeaderFieldsTooLarge, httpapi.CodeHeaderTooLarge)
	requireError(t, get(4*httpapi.ServerMaxHeaderBytes), http.StatusRequestHeaderFieldsTooLarge, httpapi.CodeHeaderTooLarge)
}

// TestStatusUnderOwner reads /v1/status over HTTP when a fenced owner
// (projection.Config.Owner) applied the whole stream: its aggregates have
// a row and no version row, and the totals still count every one of them
// and every event applied; the owner is named until its lease ends. A
// hostile query string is refused.
func TestStatusUnderOwner(t *testing.T) {
	t.Parallel()
	db, proc, events, _ := ledgertest.Fed(t, projection.Config{RetryBackoff: time.Millisecond, Owner: true}, rand.New(rand.NewPCG(13, 14)), 20, 4, ledger.New(nil))
	t.Cleanup(func() { require.NoError(t, proc.Close(context.Background())) })
	var versionRows int
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM versions`).Scan(&versionRows))
	require.Zero(t, versionRows, "the owner wrote version rows: this test would not test what it says")
	srv := httptest.NewServer(httpapi.New(proc, nil))
	t.Cleanup(srv.Close)
	b := &bundle{db: db, proc: proc, srv: srv}
	got := requireJSON[projection.Status](t, b.get(t, "/v1/status"))
	require.Len(t, got.Projections, 1)
	require.Equal(t, int64(20), got.Projections[0].Aggregates, "aggregates")
	require.Equal(t, int64(len(events)), got.Projections[0].Events, "events applied")
	host, _ := os.Hostname()
	require.NotNil(t, got.Projections[0].Owner, "the status names no owner")
	require.Equal(t, fmt.Sprintf("%s:%d", host, os.Getpid()), got.Projections[0].Owner.Holder)
	require.Positive(t, got.Projections[0].Owner.Token)
	// Once the lease ends, no owner.
	require.NoError(t, proc.Close(t.Context()))
	require.Nil(t, requireJSON[projection.Status](t, b.get(t, "/v1/status")).Projections[0].Owner, "an ended lease")
	for _, q := range []string{"?x=%27%3BDROP%20TABLE%20versions", "?" + strings.Repeat("a", 4000)} {
		requireError(t, b.get(t, "/v1/status"+q), http.StatusBadRequest, httpapi.CodeBadRequest)
	}
	require.Equal(t, got.Projections[0].Aggregates, requireJSON[projection.Status](t, b.get(t, "/v1/status")).Projections[0].Aggregates)
}
