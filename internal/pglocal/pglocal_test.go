package pglocal_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/pglocal"
)

// helperDirEnv makes the test binary act as a helper process that starts the
// cluster in the named directory and prints its URL.
const helperDirEnv = "PGLOCAL_TEST_HELPER_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperDirEnv); dir != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c, err := pglocal.Start(ctx, pglocal.Options{Dir: dir})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(c.URL())
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestFindBinDir(t *testing.T) {
	dir := binDir(t)
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		require.FileExists(t, filepath.Join(dir, name))
	}

	t.Setenv("PG_BIN", t.TempDir())
	_, err := pglocal.FindBinDir()
	require.ErrorContains(t, err, "PG_BIN")
}

func TestStartRequiresDir(t *testing.T) {
	_, err := pglocal.Start(context.Background(), pglocal.Options{})
	require.ErrorContains(t, err, "Dir is required")
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	binDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := clusterDir(t)

	began := time.Now()
	c, err := pglocal.Start(ctx, pglocal.Options{Dir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	t.Logf("initdb + start: %v", time.Since(began))
	require.True(t, strings.HasPrefix(c.URL(), "postgres://postgres@127.0.0.1:"), c.URL())

	conn, err := pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
	require.Equal(t, 1, one)
	for setting, want := range map[string]string{
		"max_connections":         "200",
		"shared_buffers":          "256MB",
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": dir,
		"synchronous_commit":      "on",
		"fsync":                   "on",
	} {
		var got string
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got))
		require.Equal(t, want, got, setting)
	}
	require.NoError(t, conn.Close(ctx))

	// A second Start finds the running server and reuses it.
	again, err := pglocal.Start(ctx, pglocal.Options{Dir: dir})
	require.NoError(t, err)
	require.Equal(t, c.URL(), again.URL())

	require.NoError(t, c.Stop(ctx))
	require.NoError(t, c.Stop(ctx), "stopping a stopped cluster is a no-op")
	_, err = pgx.Connect(ctx, c.URL())
	require.Error(t, err)

	// Restarting an existing cluster skips initdb.
	began = time.Now()
	restarted, err := pglocal.Start(ctx, pglocal.Options{Dir: dir})
	require.NoError(t, err)
	t.Logf("restart: %v", time.Since(began))
	conn, err = pgx.Connect(ctx, restarted.URL())
	require.NoError(t, err)
	require.NoError(t, conn.Ping(ctx))
	require.NoError(t, conn.Close(ctx))
	require.NoError(t, restarted.Stop(ctx))
}

func TestStartConcurrent(t *testing.T) {
	t.Parallel()
	binDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := clusterDir(t)
	t.Cleanup(func() {
		c, err := pglocal.Start(context.Background(), pglocal.Options{Dir: dir})
		if err == nil {
			_ = c.Stop(context.Background())
		}
	})

	const goroutines, processes = 3, 2
	urls := make(chan string, goroutines+processes)
	errs := make(chan error, goroutines+processes)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			c, err := pglocal.Start(ctx, pglocal.Options{Dir: dir})
			if err != nil {
				errs <- err
				return
			}
			urls <- c.URL()
		})
	}
	for range processes {
		wg.Go(func() {
			var stdout, stderr bytes.Buffer
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperDirEnv+"="+dir)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				errs <- fmt.Errorf("helper process: %w: %s", err, stderr.String())
				return
			}
			urls <- strings.TrimSpace(stdout.String())
		})
	}
	wg.Wait()
	close(urls)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	seen := map[string]int{}
	for u := range urls {
		seen[u]++
	}
	require.Len(t, seen, 1, "every caller must end up with the same cluster: %v", seen)

	for u := range seen {
		conn, err := pgx.Connect(ctx, u)
		require.NoError(t, err)
		var one int
		require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
		require.NoError(t, conn.Close(ctx))
	}
}

// TestRestart restarts a cluster in both modes: the open connection is
// gone, committed data is kept, the port is the same.
func TestRestart(t *testing.T) {
	t.Parallel()
	binDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pglocal.Start(ctx, pglocal.Options{Dir: clusterDir(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	conn, err := pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE TABLE kept (n int); INSERT INTO kept VALUES (1)`)
	require.NoError(t, err)
	port := c.Port()
	for _, mode := range []string{"fast", "immediate"} {
		began := time.Now()
		require.NoError(t, c.Restart(ctx, mode))
		t.Logf("restart -m %s: %v", mode, time.Since(began))
		require.Error(t, conn.Ping(ctx), "%s: the old connection is gone", mode)
		require.Equal(t, port, c.Port())
		conn, err = pgx.Connect(ctx, c.URL())
		require.NoError(t, err)
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT sum(n) FROM kept`).Scan(&n))
		require.Equal(t, 1, n)
	}
	require.NoError(t, conn.Close(ctx))
	require.ErrorContains(t, c.Restart(ctx, "smart"), "want fast or immediate")
	require.FileExists(t, c.LogPath())
}

func binDir(t *testing.T) string {
	t.Helper()
	dir, err := pglocal.FindBinDir()
	if err != nil {
		t.Skipf("no PostgreSQL binaries: %v", err)
	}
	return dir
}

// clusterDir returns a fresh directory the unprivileged postgres user can
// reach when the tests run as root (t.TempDir's parent is mode 0700).
func clusterDir(t *testing.T) string {
	t.Helper()
	parent, err := os.MkdirTemp("", "pglocal-test-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(parent, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	return filepath.Join(parent, "cluster")
}
