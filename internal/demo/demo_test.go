package demo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/demo"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/esdb"
)

// syncBuffer is a bytes.Buffer that signals every write.
type syncBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{}
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{written: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case b.written <- struct{}{}:
	default:
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until the buffer matches re, or done is closed.
func (b *syncBuffer) waitFor(t *testing.T, re *regexp.Regexp, done <-chan struct{}) []string {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		if m := re.FindStringSubmatch(b.String()); m != nil {
			return m
		}
		select {
		case <-b.written:
		case <-done:
			t.Fatalf("the command ended before printing %s; output:\n%s", re, b.String())
		case <-timeout:
			t.Fatalf("no %s within a minute; output:\n%s", re, b.String())
		}
	}
}

func TestDemo(t *testing.T) {
	t.Parallel()

	t.Run("VerifiesAndServes", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		p := ledger.New(nil)
		stdout, stderr := newSyncBuffer(), newSyncBuffer()
		cfg := cli.Config{Projections: []projection.Projection{p}, Sources: []source.Driver{esdb.Driver()}, Commands: []func(*cli.App) *cobra.Command{demo.Ledger(p)}, Stdout: stdout, Stderr: stderr,
			Getenv: func(string) string { return "" }}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan struct{})
		var err error
		go func() {
			defer close(done)
			err = cli.Run(ctx, cfg, []string{"demo", "--payments", "200", "--versions", "5", "--database-url", db.URL,
				"--schema", db.Schema, "--http-addr", "127.0.0.1:0", "--buffer", "8"})
		}()
		stdout.waitFor(t, regexp.MustCompile(`status --schema \S+`), done) // the last line
		out := stdout.String()
		m := regexp.MustCompile(`curl -si '(http://127\.0\.0\.1:\d+/v1/projections/ledger/aggregates/(pay-\d+))\?min_version=(\d+)'`).FindStringSubmatch(out)
		require.NotNil(t, m, out)
		require.Contains(t, out, "verified: read model equals the in-order fold")
		require.Regexp(t, `(?m)^notified:\s+[1-9]\d* payment settlements notified, each once \(\d+ deliveries: [1-9]\d* refused with a 503`, out)
		require.Regexp(t, `(?m)^events:\s+1000 \(200 payments x 5 versions\)`, out)
		require.Regexp(t, `(?m)^applied:\s+1000 `, out)
		require.Regexp(t, `curl -s 'http://127\.0\.0\.1:\d+/v1/projections/ledger/aggregates\?limit=3&payer=customer-\d+'`, out)
		require.Contains(t, stderr.String(), "simulated network failure")
		require.Regexp(t, `(?m)^notified .*payment settlements`, stderr.String(), "the notifications' progress is shown")

		// The consumers have stopped: they report no lag any more (a
		// stale one would only grow).
		base := m[1][:strings.Index(m[1], "/v1/")]
		mresp, gerr := http.Get(base + "/metrics")
		require.NoError(t, gerr)
		scraped, gerr := io.ReadAll(mresp.Body)
		mresp.Body.Close()
		require.NoError(t, gerr)
		require.Contains(t, string(scraped), `inorder_source_received_total{source="demo-consumer-1"}`, "the consumers' metrics are there")
		require.NotContains(t, string(scraped), "inorder_source_lag_events{", "but no lag of stopped consumers")

		resp, gerr := http.Get(m[1] + "?min_version=" + m[3])
		require.NoError(t, gerr)
		var body struct {
			Aggregate string `json:"aggregate"`
			Version   int64  `json:"version"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, m[2], body.Aggregate)
		require.Equal(t, m[3], fmt.Sprint(body.Version))

		cancel()
		<-done
		require.NoError(t, err)
	})

	// --source postgres: the workload goes to inorder's events table, from
	// concurrent writers, while consumers sharing its partitions consume
	// it; one is cut off halfway. --source nats: the workload goes to an
	// in-process NATS server's stream, a third of it published twice,
	// while consumers sharing one durable consumer consume it; one is cut
	// off halfway (its batch may commit unheard: the demo waits on the read
	// model, not the counters). The fold is verified, and so are the
	// effects.
	for _, tc := range []struct{ name, source, consumers string }{
		{"EventsTable", "postgres", `(?m)^consumers:\s+3 sharing the events table's partitions`},
		{"NATS", "nats", `(?m)^consumers:\s+3 sharing one durable NATS consumer \(one cut off halfway\)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			p := ledger.New(nil)
			var stdout, stderr bytes.Buffer
			cfg := cli.Config{Projections: []projection.Projection{p}, Commands: []func(*cli.App) *cobra.Command{demo.Ledger(p)},
				Stdout: &stdout, Stderr: &stderr, Getenv: func(string) string { return "" }}
			err := cli.Run(t.Context(), cfg, []string{"demo", "--source", tc.source, "--exit", "--payments", "200", "--versions", "5",
				"--database-url", db.URL, "--schema", db.Schema, "--consumers", "3"})
			require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
			out := stdout.String()
			require.Contains(t, out, "verified: read model equals the in-order fold")
			require.Regexp(t, `(?m)^events:\s+1000 \(200 payments x 5 versions\)`, out)
			require.Regexp(t, `(?m)^applied:\s+1000 `, out)
			require.Regexp(t, tc.consumers, out)
			require.Regexp(t, `(?m)^notified:\s+[1-9]\d* payment settlements notified, each once`, out)
			require.Contains(t, stderr.String(), "consumer 1 cut off at")
		})
	}

	t.Run("MismatchFails", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		p := ledger.New(nil)
		w := demo.LedgerWorkload(p)
		verify := w.Verify
		w.Verify = func(ctx context.Context, q projection.Querier, events []aggregate.Event) error {
			// Check against a workload with one event too many: the read
			// model cannot equal its fold.
			last := events[len(events)-1]
			next, err := aggregate.New(last.Aggregate, maxVersion(events, last.Aggregate)+1, ledger.Voided, ledger.Data{})
			require.NoError(t, err)
			return verify(ctx, q, append(events[:len(events):len(events)], next))
		}
		// Loggers write from several goroutines: the buffers must be safe
		// for that.
		stdout, stderr := newSyncBuffer(), newSyncBuffer()
		cfg := cli.Config{Projections: []projection.Projection{p}, Sources: []source.Driver{esdb.Driver()}, Commands: []func(*cli.App) *cobra.Command{demo.Command(w)}, Stdout: stdout, Stderr: stderr,
			Getenv: func(string) string { return "" }}
		err := cli.Run(t.Context(), cfg, []string{"demo", "--payments", "20", "--versions", "3", "--database-url", db.URL,
			"--schema", db.Schema, "--exit"})
		require.ErrorIs(t, err, demo.ErrVerify)
		require.Contains(t, stdout.String(), "NOT verified")
		require.NotContains(t, stdout.String(), "verified: read model equals")
		require.Contains(t, err.Error(), "payments differ")
	})

	t.Run("JSONLogs", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		p := ledger.New(nil)
		stdout, stderr := newSyncBuffer(), newSyncBuffer() // loggers write from several goroutines
		cfg := cli.Config{Projections: []projection.Projection{p}, Sources: []source.Driver{esdb.Driver()}, Commands: []func(*cli.App) *cobra.Command{demo.Ledger(p)},
			Stdout: stdout, Stderr: stderr, Getenv: func(string) string { return "" }}
		err := cli.Run(t.Context(), cfg, []string{"demo", "--payments", "20", "--versions", "3", "--database-url", db.URL,
			"--schema", db.Schema, "--exit", "--log-format", "json", "--log-level", "info"})
		require.NoError(t, err, stderr.String())
		for name, out := range map[string]string{"stdout": stdout.String(), "stderr": stderr.String()} {
			require.NotEmpty(t, out, name)
			for line := range strings.Lines(out) {
				var obj map[string]any
				require.NoError(t, json.Unmarshal([]byte(line), &obj), "%s: not JSON: %q", name, line)
			}
		}
		require.Contains(t, stdout.String(), `"msg":"verified: read model equals the in-order fold"`)
		require.Contains(t, stderr.String(), `"msg":"progress"`)
	})

	t.Run("Usage", func(t *testing.T) {
		t.Parallel()
		p := ledger.New(nil)
		var stdout bytes.Buffer
		cfg := cli.Config{Projections: []projection.Projection{p}, Sources: []source.Driver{esdb.Driver()}, Commands: []func(*cli.App) *cobra.Command{demo.Ledger(p)}, Stdout: &stdout, Stderr: &stdout,
			Getenv: func(string) string { return "" }}
		err := cli.Run(t.Context(), cfg, []string{"demo", "--payments", "0"})
		require.ErrorIs(t, err, cli.ErrUsage)
		require.ErrorContains(t, err, "--payments must be at least 1")
		err = cli.Run(t.Context(), cfg, []string{"demo", "--help"})
		require.NoError(t, err)
		require.Contains(t, stdout.String(), "DROPS the demo schema")
		require.True(t, strings.Contains(stdout.String(), "--payments int"), stdout.String())
	})
}

func maxVersion(events []aggregate.Event, agg string) int64 {
	var v int64
	for _, e := range events {
		if e.Aggregate == agg {
			v = max(v, e.Version)
		}
	}
	return v
}
