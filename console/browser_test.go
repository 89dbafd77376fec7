package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inorder/inorder/internal/syncbuf"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/esdb"
	"github.com/inorder/inorder/source/esdb/esdbtest"
)

const (
	readToken  = "read-token-for-the-test"
	adminToken = "admin-token-for-the-test"
	// hostile is what an attacker puts in an event: markup and script.
	hostile    = `<script>window.__pwned=1</script>"><img src=x onerror="window.__pwned=2">`
	hostileAgg = `x"><img src=y onerror="window.__pwned=3">`
)

// chromium returns the browser to drive, or skips the test — except in CI
// (CI=true), where .ci/run installs it and a missing browser fails.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "chromium", "chromium-browser"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed: .ci/run installs Debian's chromium; a browser test must not be skipped in CI")
	}
	t.Skip("chromium is not installed (apt-get install chromium); CI=true makes this a failure")
	return ""
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer = syncbuf.Buffer

// bundle is a running 'inorder run --console' on a real PostgreSQL schema
// and an EventStoreDB protocol server, with a browser.
type bundle struct {
	t      *testing.T
	db     *pgtest.DB
	es     *esdbtest.Server
	notes  *notes
	base   string // http://127.0.0.1:port
	logs   *syncBuffer
	ctx    context.Context // the browser's
	shots  string          // where screenshots go, "" for nowhere
	events int             // events appended
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

func (b *bundle) appendNote(agg, body string) {
	b.t.Helper()
	var data bytes.Buffer
	enc := json.NewEncoder(&data)
	enc.SetEscapeHTML(false) // the payload holds the markup itself
	require.NoError(b.t, enc.Encode(noteData{Body: body}))
	_, err := b.es.Append("note-"+agg, esdbtest.Event{Type: "note.written", Data: data.Bytes()})
	require.NoError(b.t, err)
	b.events++
}

func setup(t *testing.T) *bundle {
	path := chromium(t)
	b := &bundle{t: t, db: pgtest.NewMigrated(t), es: esdbtest.New(t), notes: &notes{}, logs: &syncBuffer{}}
	t.Cleanup(func() { b.db.DropGenerationSchemas(t) })
	if dir := os.Getenv("INORDER_CONSOLE_SCREENSHOTS"); dir != "" {
		b.shots = dir
	}
	b.notes.failing.Store(true)
	b.notes.hold.Store(true) // the first batch waits: the source lags
	for i := range 20 {
		for v := range 3 {
			b.appendNote(fmt.Sprintf("n%02d", i), fmt.Sprintf("note %d, version %d", i, v+1))
		}
	}
	b.appendNote("bad", "fail until the fault is fixed")
	for i := range 3 {
		b.appendNote(fmt.Sprintf("bulk-%d", i), "fail: bulk")
	}
	b.appendNote(hostileAgg, "fail "+hostile)
	// A delivery that is not JSON: rejected.
	_, err := b.es.Append("note-binary", esdbtest.Event{Type: "note.written", ContentType: "application/octet-stream", Data: []byte{0xff, 0x00, '<'}})
	require.NoError(t, err)
	b.events++

	addr := freeAddr(t)
	b.base = "http://" + addr
	env := map[string]string{"DATABASE_URL": b.db.URL, "INORDER_SCHEMA": b.db.Schema, "ESDB_URL": b.es.URL(),
		"INORDER_STREAM_PREFIX": "note-", "INORDER_HTTP_TOKEN": readToken, "INORDER_HTTP_ADMIN_TOKEN": adminToken}
	cfg := cli.Config{Projections: []projection.Projection{b.notes}, Sources: []source.Driver{esdb.Driver()}, Stdout: b.logs, Stderr: b.logs,
		Processor: projection.Config{MaxAttempts: 1, RetryBackoff: time.Millisecond},
		Getenv:    func(k string) string { return env[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- cli.Run(ctx, cfg, []string{"run", "--name", "notes-source", "--http-addr", addr, "--console", "--console-payloads",
			"--max-wait", "5ms", "--batch-size", "20", "--workers", "2", "--log-level", "warn"})
	}()
	t.Cleanup(func() {
		b.notes.hold.Store(false)
		cancel()
		if err := <-done; err != nil && !errors.Is(err, esdb.ErrAborted) && !errors.Is(err, context.Canceled) {
			t.Errorf("inorder run: %v\n%s", err, b.logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(b.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		require.True(t, time.Now().Before(deadline), "the server did not start: %s", b.logs.String())
		time.Sleep(20 * time.Millisecond)
	}

	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900)}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelA)
	bctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(cancelB)
	b.ctx = bctx
	// The first run starts the browser, for the context's lifetime: no
	// timeout on it.
	require.NoError(t, chromedp.Do(bctx, chromedp.Navigate("about:blank")))
	return b
}

// run runs browser actions with a deadline.
func (b *bundle) run(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	require.NoError(b.t, chromedp.Do(ctx, actions...), "logs:\n%s", b.logs.String())
}

// get runs one browser action that returns a value.
func get[T any](b *bundle, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	require.NoError(b.t, err, "logs:\n%s", b.logs.String())
	return v
}

// text returns the text of the first element matching sel ("" if none),
// read in one evaluation: the page's live refresh may replace the nodes
// between two protocol calls.
func (b *bundle) text(sel string) string {
	b.t.Helper()
	q, err := json.Marshal(sel)
	require.NoError(b.t, err)
	return get(b, chromedp.Evaluate[string](`(document.querySelector(`+string(q)+`) || {innerText: ""}).innerText`))
}

func click(sel string) chromedp.Action[chromedp.Void] { return chromedp.Click(chromedp.CSS(sel)) }
func visible(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}
func keys(sel, v string) chromedp.Action[chromedp.Void] {
	return chromedp.SendKeys(chromedp.CSS(sel), v)
}

// eventually polls cond (it may run browser actions) until it holds.
func (b *bundle) eventually(what string, cond func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
			page, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
			cancel()
			b.t.Fatalf("timed out waiting for %s; page:\n%s\nlogs:\n%s", what, page, b.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shot saves a screenshot of the viewport as name.png, when asked to.
func (b *bundle) shot(name string) {
	b.t.Helper()
	if b.shots == "" {
		return
	}
	png := get(b, chromedp.CaptureScreenshot())
	require.NoError(b.t, os.MkdirAll(b.shots, 0o755))
	require.NoError(b.t, os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644))
}

func (b *bundle) page(path string) {
	b.t.Helper()
	b.run(chromedp.Navigate(b.base+path), chromedp.WaitReady(chromedp.CSS("body")))
}

// api reads the HTTP API with the read token; status 0 when it could not.
func (b *bundle) api(path string) (int, []byte) {
	req, err := http.NewRequest(http.MethodGet, b.base+path, nil)
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Authorization", "Bearer "+readToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp.StatusCode, buf.Bytes()
}

func (b *bundle) count(sql string, args ...any) int64 {
	var n int64
	require.NoError(b.t, b.db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// TestConsoleInBrowser drives the console of a real 'inorder run' in
// headless Chromium, as an operator would: log in, see the source lag,
// retry a quarantined event once its fault is fixed, see a hostile payload
// as text, bulk-skip with a preview first, and rebuild side by side with a
// switch button, reads staying whole.
func TestConsoleInBrowser(t *testing.T) {
	b := setup(t)

	// The pages need the read token: a visit without a session goes to
	// the login page.
	b.page("/console/")
	b.run(visible("#login"))
	b.shot("login")
	b.run(
		keys(`input[name=admin_token]`, adminToken),
		keys(`input[name=name]`, "alice"),
		click("#login"),
		visible("#projections"),
	)
	require.Contains(t, b.text("#who"), "alice · admin")

	// A fenced owner's lease (--owner) is named on the overview, its
	// holder as text even when it is markup.
	const holder = `<img src=x onerror="window.__owned=1">:4242`
	_, err := b.db.Pool.Exec(context.Background(), `INSERT INTO owners (gate_key, token, holder) VALUES ('notes', 3, $1)`, holder)
	require.NoError(t, err)
	b.eventually("the overview to name the owner", func() bool {
		return b.text(`tr.proj[data-projection="notes"] .owner`) == "owned by "+holder
	})
	require.Zero(t, get(b, chromedp.Evaluate[int](`document.querySelectorAll("#projections img").length`)), "a holder became markup")
	require.False(t, get(b, chromedp.Evaluate[bool](`window.__owned !== undefined`)), "a holder's script ran")

	// The overview shows the lagging projection: its handler holds the
	// first batch while the source measures how much is left. The page
	// refreshes itself.
	b.eventually("the overview to show the lag", func() bool {
		s := b.text(`tr.proj[data-projection="notes"] .lag-events`)
		n, _ := strconv.Atoi(strings.Fields(s + " x")[0])
		return n > 0
	})
	b.shot("overview")
	b.notes.hold.Store(false)
	b.eventually("the lag to clear", func() bool {
		s := b.text(`tr.proj[data-projection="notes"] .lag-events`)
		return strings.HasPrefix(s, "0 ")
	})
	quarantined := func() int64 {
		return b.count(`SELECT count(*) FROM quarantine WHERE projection = 'notes'`)
	}
	b.eventually("5 quarantined events", func() bool { return quarantined() == 5 })

	// Retry a quarantined event from its aggregate's page, once the fault
	// is fixed: the preview first, then the confirmation; the event is
	// then applied in the read model.
	status, _ := b.api("/v1/projections/notes/aggregates/bad")
	require.Equal(t, http.StatusNotFound, status)
	b.notes.failing.Store(false)
	b.page("/console/aggregate?projection=notes&id=bad")
	b.run(visible("#quarantined"))
	b.shot("aggregate")
	b.run(click("#retry"), visible("#preview"))
	require.Contains(t, b.text("#preview"), "would apply version 1")
	require.Equal(t, int64(5), quarantined(), "a preview changes nothing")
	b.run(click("#confirm"), visible("#result"))
	require.Contains(t, b.text("#result"), "applied")
	status, body := b.api("/v1/projections/notes/aggregates/bad")
	require.Equal(t, http.StatusOK, status, string(body))
	require.Contains(t, string(body), "fail until the fault is fixed")
	require.Equal(t, int64(4), quarantined())

	// A hostile payload and aggregate id render as text: no element is
	// made of them, no script runs.
	b.page("/console/quarantine?projection=notes")
	b.run(visible("#rows"))
	b.shot("quarantine")
	imgs := get(b, chromedp.Evaluate[int](`document.querySelectorAll("img").length`))
	pwned := get(b, chromedp.Evaluate[bool](`window.__pwned !== undefined`))
	require.Zero(t, imgs, "markup from an event became an element")
	require.False(t, pwned, "script from an event ran")
	rows := b.text("#rows")
	require.Contains(t, rows, `<script>window.__pwned=1</script>`) // in the payload, a JSON string
	require.Contains(t, rows, `<img src=x onerror=`)
	require.Contains(t, rows, hostileAgg)

	// Bulk skip of everything matching the filter: the preview shows the
	// count and changes nothing; the confirmation acts on those.
	b.run(keys(`#bulk-skip-form input[name=reason]`, "known bad data"),
		click("#bulk-skip"), visible("#preview"))
	require.Contains(t, b.text("#preview"), "would skip 4 item(s)")
	require.Contains(t, b.text("#confirm"), "Confirm: skip 4 item(s)")
	b.shot("bulk-preview")
	require.Equal(t, int64(4), quarantined(), "a preview changes nothing")
	b.run(click("#confirm"), visible("#result"))
	require.Contains(t, b.text("#result"), "4 done, 0 failed")
	require.Zero(t, quarantined())
	require.Equal(t, int64(4), b.count(`SELECT count(*) FROM operator_log WHERE action = 'skip' AND actor = 'console:alice' AND reason = 'known bad data'`))

	// The other pages, for the record.
	for _, p := range []struct{ path, sel, name string }{
		{"/console/rejected", "#rows", "rejected"},
		{"/console/log", "#rows", "log"},
	} {
		b.page(p.path)
		b.run(visible(p.sel))
		b.shot(p.name)
	}
	require.Contains(t, b.text("#rows"), "skip")

	// A side-by-side rebuild started from the console: its progress
	// advances on the rebuild page, it waits caught up, and the switch
	// button cuts over; reads stay whole meanwhile.
	var readErrs, reads atomic.Int64
	stopReads := make(chan struct{})
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-stopReads:
				return
			default:
			}
			status, body := b.api("/v1/projections/notes/aggregates/n07")
			var got struct {
				Version int64 `json:"version"`
				Data    note  `json:"data"`
			}
			if status != http.StatusOK || json.Unmarshal(body, &got) != nil || got.Version != 3 || got.Data.Body != "note 7, version 3" {
				readErrs.Add(1)
			}
			reads.Add(1)
		}
	})
	b.notes.delay.Store(int64(40 * time.Millisecond)) // about 3 s of replay: enough to watch
	b.page("/console/rebuilds?projection=notes")
	b.run(click("#expect-changes"), click("#rebuild-start"), visible("#preview"),
		click("#confirm"), visible("#result"))
	b.page("/console/rebuilds?projection=notes")
	type sample struct {
		phase  string
		events int64
	}
	var seen []sample
	row := `#generations tr[data-generation="2"]`
	b.eventually("generation 2 ready to switch", func() bool {
		if get(b, chromedp.Evaluate[int](`document.querySelectorAll('`+row+`').length`)) == 0 {
			return false
		}
		phase, events := b.text(row+" .phase"), b.text(row+" .events")
		e, _ := strconv.ParseInt(strings.TrimSpace(events), 10, 64)
		if len(seen) == 0 || seen[len(seen)-1] != (sample{phase, e}) {
			seen = append(seen, sample{phase, e})
		}
		if phase == projection.PhaseReplay && b.shots != "" && len(seen) == 1 {
			b.shot("rebuild")
		}
		return phase == projection.PhaseReady
	})
	b.notes.delay.Store(0)
	require.GreaterOrEqual(t, len(seen), 2, "the page showed the rebuild's progress: %v", seen)
	for i := 1; i < len(seen); i++ {
		require.GreaterOrEqual(t, seen[i].events, seen[i-1].events, "events read never go back: %v", seen)
	}
	require.Equal(t, int64(b.events), seen[len(seen)-1].events, "the rebuild read every event: %v", seen)
	b.shot("rebuild-ready")
	require.Equal(t, "live", b.text(`#generations tr[data-generation="1"] .gstate`), "the old generation serves until the switch")
	b.run(click(row+" button.switch"), visible("#preview"),
		click("#confirm"), visible("#result"))
	b.page("/console/rebuilds?projection=notes")
	b.eventually("generation 2 live", func() bool { return b.text(row+" .gstate") == "live" })
	require.Equal(t, "previous", b.text(`#generations tr[data-generation="1"] .gstate`))
	b.shot("rebuild-switched")
	close(stopReads)
	readers.Wait()
	require.Positive(t, reads.Load())
	require.Zero(t, readErrs.Load(), "a read during the rebuild and its switch was not whole")
	status, body = b.api("/v1/projections/notes/aggregates/bad")
	require.Equal(t, http.StatusOK, status, string(body))
	require.Equal(t, int64(1), b.count(`SELECT count(*) FROM operator_log WHERE action = 'rebuild-switch-request' AND actor = 'console:alice'`))
}
