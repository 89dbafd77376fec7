package main_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/source/pgtable"
)

// previousRelease is the inorder binary built from the commit before the
// newest migration, with the number of that migration and whether it is
// online.
type previousRelease struct {
	binary  string
	commit  string
	newest  int    // the newest migration's version
	name    string // its file name, without .up.sql
	online  bool
	buildIn time.Duration
}

// buildPreviousRelease builds the binary of the commit before the one that
// added the newest migration (HEAD when that migration is not committed
// yet). Without git or the history (a shallow clone), it fails the test
// when CI=true and skips it otherwise, saying why.
func buildPreviousRelease(t *testing.T) *previousRelease {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("CI") == "true" {
			t.Fatalf("rolling-upgrade test: %s; CI must check out the history (e.g. actions/checkout with fetch-depth: 0)", msg)
		}
		t.Skipf("rolling-upgrade test needs the previous release: %s (with CI=true this fails)", msg)
	}
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
		}
		return strings.TrimSpace(out.String()), nil
	}
	if _, err := exec.LookPath("git"); err != nil {
		unavailable("no git command: %v", err)
	}
	root, err := git("rev-parse", "--show-toplevel")
	if err != nil {
		unavailable("not in a git checkout: %v", err)
	}

	entries, err := os.ReadDir(filepath.Join(root, "migrations", "sql"))
	require.NoError(t, err)
	rel := &previousRelease{}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".up.sql")
		if !ok {
			continue
		}
		v, err := strconv.Atoi(name[:strings.IndexByte(name, '_')])
		require.NoError(t, err, e.Name())
		if v > rel.newest {
			rel.newest, rel.name = v, name
		}
	}
	require.NotZero(t, rel.newest, "no migrations found")
	body, err := os.ReadFile(filepath.Join(root, "migrations", "sql", rel.name+".up.sql"))
	require.NoError(t, err)
	rel.online = bytes.HasPrefix(body, []byte("-- inorder:online"))

	added, err := git("-C", root, "log", "--diff-filter=A", "--format=%H", "-n", "1", "--", "migrations/sql/"+rel.name+".up.sql")
	if err != nil {
		unavailable("%v", err)
	}
	rel.commit = "HEAD" // the newest migration is not committed yet: HEAD is the release before it
	if added != "" {
		rel.commit = added + "^"
	}
	if rel.commit, err = git("-C", root, "rev-parse", "--verify", rel.commit+"^{commit}"); err != nil {
		unavailable("the commit before %s is not in this clone: %v", rel.name, err)
	}

	// git archive of that commit into a directory of the test's, then go
	// build there, as a clean checkout would.
	src := t.TempDir()
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", rel.commit)
	var tarball, errOut bytes.Buffer
	archive.Stdout, archive.Stderr = &tarball, &errOut
	if err := archive.Run(); err != nil {
		unavailable("git archive %s: %v: %s", rel.commit, err, errOut.String())
	}
	untar(t, &tarball, src)
	rel.binary = filepath.Join(t.TempDir(), "inorder-previous")
	began := time.Now()
	// -trimpath, as TestMain builds the new binary: the packages the two
	// commits share are not compiled again.
	build := exec.Command(goTool(), "build", "-trimpath", "-o", rel.binary, "./cmd/inorder")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build of %s: %s", rel.commit, out)
	rel.buildIn = time.Since(began)
	return rel
}

// untar extracts a tar stream of regular files and directories into dir.
func untar(t *testing.T, r io.Reader, dir string) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(t, err)
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		require.True(t, strings.HasPrefix(path, dir+string(filepath.Separator)), "archive entry %q leaves the directory", h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			require.NoError(t, os.MkdirAll(path, 0o755))
		case tar.TypeReg:
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o777|0o200)
			require.NoError(t, err)
			_, err = io.Copy(f, tr)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}
	}
}

// appender appends ledger payments to the events table until stopped, in
// bursts, each burst new payments and the next versions of earlier ones.
type appender struct {
	mu     sync.Mutex
	events []aggregate.Event
	err    error
	stop   chan struct{}
	done   chan struct{}
}

func (e *env) appendUntilStopped(t *testing.T) *appender {
	t.Helper()
	a := &appender{stop: make(chan struct{}), done: make(chan struct{})}
	w := pgtable.NewWriter(e.db.Schema, nil)
	go func() {
		defer close(a.done)
		for burst := 0; ; burst++ {
			select {
			case <-a.stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			events := ledger.Generate(rand.New(rand.NewPCG(uint64(burst), 27)), 8, 5)
			for i := range events {
				events[i].Aggregate = fmt.Sprintf("b%04d-%s", burst, events[i].Aggregate)
			}
			if err := w.Append(t.Context(), e.db.Pool, events...); err != nil {
				a.mu.Lock()
				a.err = err
				a.mu.Unlock()
				return
			}
			a.mu.Lock()
			a.events = append(a.events, events...)
			a.mu.Unlock()
		}
	}()
	return a
}

// finish stops the appender and returns every event it appended.
func (a *appender) finish(t *testing.T) []aggregate.Event {
	t.Helper()
	close(a.stop)
	<-a.done
	a.mu.Lock()
	defer a.mu.Unlock()
	require.NoError(t, a.err)
	return slices.Clone(a.events)
}

// waitAppliedAbove waits until the ledger has applied more than n events
// and returns how many it has.
func (e *env) waitAppliedAbove(t *testing.T, n int64, timeout time.Duration) int64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if got := e.applied(t); got > n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("no more than %d events applied after %s", n, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var errorLogRE = regexp.MustCompile(`(?m)^.*"level":"ERROR".*$`)

// requireCleanExit stops p with SIGTERM and requires a drained exit (0)
// with no error logged.
func requireCleanExit(t *testing.T, p *process, who string) {
	t.Helper()
	p.signal(t, syscall.SIGTERM)
	require.NoError(t, p.wait(t, time.Minute), "%s exits cleanly\nstderr:\n%s", who, p.stderr.String())
	require.Empty(t, errorLogRE.FindAllString(p.stderr.String(), 5), "%s logged no error", who)
}

// TestRollingUpgrade runs workers of the previous release (the binary built
// from the commit before the newest migration) on inorder's own events
// table under a continuous append load; the new binary migrates while they
// run, its workers start beside them, and the old ones are stopped one by
// one: every event is applied once (the read model equals the in-order
// fold), and no process exits with, or logs, an error. When the newest
// migration is offline, the new binary must refuse to apply it while the
// old workers run, and the upgrade stops them first (docs/operations.md).
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	rel := buildPreviousRelease(t)
	t.Logf("previous release: %s (before %s, %s), built in %s",
		rel.commit[:12], rel.name, map[bool]string{true: "online", false: "offline"}[rel.online], rel.buildIn.Round(time.Millisecond))

	e := newEnv(t)
	e.vars["INORDER_LOG_FORMAT"] = "json"
	var res struct {
		Steps []struct {
			Version int `json:"version"`
		} `json:"steps"`
	}
	oldMigrate := exec.Command(rel.binary, "migrate", "--json")
	oldMigrate.Env = e.environ()
	stdout, err := oldMigrate.Output()
	require.NoError(t, err, "the previous release migrates")
	require.NoError(t, json.Unmarshal(stdout, &res))
	require.Len(t, res.Steps, rel.newest-1, "the previous release stops before %s", rel.name)

	load := e.appendUntilStopped(t)
	runArgs := []string{"run", "--source", "postgres", "--workers", "2", "--batch-size", "50", "--http-addr", "127.0.0.1:0"}
	old := []*process{e.startWith(t, rel.binary, runArgs...), e.startWith(t, rel.binary, runArgs...)}
	for _, p := range old {
		p.baseURL(t)
	}
	applied := e.waitAppliedAbove(t, 200, time.Minute)

	// The new binary migrates while the old workers process the load.
	if rel.online {
		out := e.run(t, "migrate")
		require.Contains(t, out, fmt.Sprintf("applied %s to schema %s", rel.name, e.db.Schema))
		// The old workers keep working on the newer schema.
		applied = e.waitAppliedAbove(t, e.applied(t)+200, time.Minute)
		for i, p := range old {
			select {
			case <-p.done:
				t.Fatalf("old worker %d exited after the migration: %v\nstderr:\n%s", i, p.err, p.stderr.String())
			default:
			}
		}
	} else {
		_, errOut, err := e.exec(t, "migrate")
		require.Error(t, err, "an offline migration is refused while the old workers run")
		require.Contains(t, errOut, rel.name+" is offline and")
		require.Contains(t, errOut, "--force")
		for i, p := range old {
			requireCleanExit(t, p, fmt.Sprintf("old worker %d", i))
		}
		e.run(t, "migrate")
	}

	// The new release's workers start beside the old ones and take their
	// share of the partitions; then the old ones are stopped one by one.
	nw := []*process{e.start(t, runArgs...), e.start(t, runArgs...)}
	for _, p := range nw {
		p.baseURL(t)
	}
	applied = e.waitAppliedAbove(t, applied+200, time.Minute)
	if rel.online {
		var dry struct {
			Workers int `json:"workers_connected"`
		}
		e.runJSON(t, &dry, "migrate", "--dry-run")
		require.Greater(t, dry.Workers, 2, "the new workers' announcements and the old workers' sessions")
		for i, p := range old {
			requireCleanExit(t, p, fmt.Sprintf("old worker %d", i))
			applied = e.waitAppliedAbove(t, applied+100, time.Minute)
		}
	}
	var dry struct {
		Workers int `json:"workers_connected"`
	}
	e.runJSON(t, &dry, "migrate", "--dry-run")
	require.Equal(t, 2, dry.Workers, "the two new workers, announced")

	events := load.finish(t)
	t.Logf("%d events appended under the upgrade", len(events))
	e.waitApplied(t, int64(len(events)), time.Minute)
	e.requireFold(t, events)
	for i, p := range nw {
		requireCleanExit(t, p, fmt.Sprintf("new worker %d", i))
	}
	e.requireFold(t, events)
}
