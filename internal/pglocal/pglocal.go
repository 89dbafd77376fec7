package pglocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	dataSubdir  = "data"
	initSubdir  = "data.init"
	logName     = "postgres.log"
	lockName    = "pglocal.lock"
	confName    = "pglocal.conf"
	pidName     = "postmaster.pid"
	versionName = "PG_VERSION"

	// maxSocketPath is the longest Unix socket path PostgreSQL accepts
	// (sizeof(sockaddr_un.sun_path) - 1 on Linux).
	maxSocketPath = 107

	readyTimeout = 60 * time.Second
	startRetries = 3
)

// Options configures Start.
type Options struct {
	// Dir is the directory that holds the cluster's data, its log and its
	// Unix socket. It is created if missing. Required.
	Dir string
	// Port is the TCP port the server listens on, on 127.0.0.1 only. Zero
	// picks a free port whenever the server has to be started; a server
	// that is already running keeps its port.
	Port int
	// Logger receives progress messages. Nil discards them.
	Logger *slog.Logger
}

// Cluster is a PostgreSQL cluster started, or found running, by Start.
type Cluster struct {
	dir     string
	dataDir string
	binDir  string
	port    int
	logger  *slog.Logger
	runAs   *account
}

// account is the unprivileged user the PostgreSQL binaries run as when the
// calling process is root.
type account struct {
	name     string
	uid, gid uint32
}

// Start returns the cluster in opts.Dir, running. It initialises the
// cluster if Dir holds none, starts it with pg_ctl if it is not running, and
// reuses it if it is. It returns once the server accepts connections.
//
// Concurrent calls for the same Dir, from any number of processes, are
// serialised by a file lock and all end up with the same server.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("pglocal: Options.Dir is required")
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("pglocal: invalid port %d", opts.Port)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("pglocal: resolve dir: %w", err)
	}
	binDir, err := FindBinDir()
	if err != nil {
		return nil, err
	}
	runAs, err := lookupRunAs()
	if err != nil {
		return nil, err
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{
		dir:     dir,
		dataDir: filepath.Join(dir, dataSubdir),
		binDir:  binDir,
		logger:  logger.With("dir", dir),
		runAs:   runAs,
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pglocal: create dir: %w", err)
	}
	if runAs != nil {
		if err := os.Chown(dir, int(runAs.uid), int(runAs.gid)); err != nil {
			return nil, fmt.Errorf("pglocal: hand %s to user %s: %w", dir, runAs.name, err)
		}
		if err := checkSearchable(dir, runAs); err != nil {
			return nil, err
		}
	}

	unlock, err := lockFile(ctx, filepath.Join(dir, lockName))
	if err != nil {
		return nil, err
	}
	defer unlock()

	if port, ok := c.runningPort(); ok {
		if opts.Port != 0 && opts.Port != port {
			return nil, fmt.Errorf("pglocal: cluster in %s already runs on port %d, not %d", dir, port, opts.Port)
		}
		c.port = port
		c.logger.Debug("pglocal: reusing running cluster", "port", port)
		if err := c.waitReady(ctx); err != nil {
			return nil, err
		}
		return c, nil
	}

	if _, err := os.Stat(filepath.Join(c.dataDir, versionName)); errors.Is(err, fs.ErrNotExist) {
		if err := c.initdb(ctx); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("pglocal: inspect data dir: %w", err)
	}

	for attempt := 1; ; attempt++ {
		err := c.start(ctx, opts.Port)
		if err == nil {
			break
		}
		// A free port picked by us may have been taken in the meantime:
		// try another one.
		if opts.Port != 0 || attempt == startRetries || ctx.Err() != nil {
			return nil, err
		}
		c.logger.Warn("pglocal: start failed, retrying on another port", "error", err)
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// URL returns the connection URL of the cluster's "postgres" database, for
// the superuser "postgres" over TCP.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Stop shuts the cluster down (pg_ctl stop -m fast) and waits for it to
// exit. Stopping a cluster that is not running is not an error. Stop also
// stops a cluster that Start found already running.
func (c *Cluster) Stop(ctx context.Context) error {
	unlock, err := lockFile(ctx, filepath.Join(c.dir, lockName))
	if err != nil {
		return err
	}
	defer unlock()
	if _, ok := c.runningPort(); !ok {
		return nil
	}
	if _, err := c.run(ctx, "pg_ctl", "stop", "-D", c.dataDir, "-m", "fast", "-w", "-s"); err != nil {
		return fmt.Errorf("pglocal: stop: %w", err)
	}
	c.logger.Info("pglocal: stopped", "port", c.port)
	return nil
}

// Restart restarts the running server with pg_ctl restart, in mode "fast"
// (clients are disconnected with an error, then a clean shutdown) or
// "immediate" (every server process is killed at once, and the start is a
// crash recovery), and returns once it accepts connections again, on the
// same port. It is for tests that inject faults.
func (c *Cluster) Restart(ctx context.Context, mode string) error {
	if mode != "fast" && mode != "immediate" {
		return fmt.Errorf("pglocal: restart mode %q: want fast or immediate", mode)
	}
	unlock, err := lockFile(ctx, filepath.Join(c.dir, lockName))
	if err != nil {
		return err
	}
	defer unlock()
	began := time.Now()
	logPath := filepath.Join(c.dir, logName)
	if _, err := c.run(ctx, "pg_ctl", "restart", "-D", c.dataDir, "-m", mode, "-l", logPath, "-w", "-t", "60", "-s"); err != nil {
		return fmt.Errorf("pglocal: restart -m %s: %w (log tail: %s)", mode, err, tail(logPath, 1024))
	}
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	c.logger.Info("pglocal: restarted", "mode", mode, "port", c.port, "elapsed", time.Since(began))
	return nil
}

// Port returns the TCP port the server listens on.
func (c *Cluster) Port() int { return c.port }

// LogPath returns the path of the server's log file.
func (c *Cluster) LogPath() string { return filepath.Join(c.dir, logName) }

// FindBinDir returns the directory holding the PostgreSQL server binaries
// (initdb, pg_ctl, postgres): $PG_BIN if set, else the highest version
// under /usr/lib/postgresql/*/bin, else the directory of pg_ctl on $PATH.
func FindBinDir() (string, error) {
	if dir := os.Getenv("PG_BIN"); dir != "" {
		if !hasServerBinaries(dir) {
			return "", fmt.Errorf("pglocal: PG_BIN=%s has no initdb and pg_ctl", dir)
		}
		return dir, nil
	}
	dirs, err := filepath.Glob("/usr/lib/postgresql/*/bin")
	if err != nil {
		return "", fmt.Errorf("pglocal: find binaries: %w", err)
	}
	sort.Slice(dirs, func(i, j int) bool {
		return versionLess(filepath.Base(filepath.Dir(dirs[j])), filepath.Base(filepath.Dir(dirs[i])))
	})
	for _, dir := range dirs {
		if hasServerBinaries(dir) {
			return dir, nil
		}
	}
	if path, err := exec.LookPath("pg_ctl"); err == nil && hasServerBinaries(filepath.Dir(path)) {
		return filepath.Dir(path), nil
	}
	return "", errors.New("pglocal: no PostgreSQL server binaries found (set PG_BIN or install postgresql)")
}

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// versionLess orders PostgreSQL version directory names such as "9.6",
// "15" and "16" numerically.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		ai, aerr := strconv.Atoi(as[i])
		bi, berr := strconv.Atoi(bs[i])
		if aerr != nil || berr != nil {
			return a < b
		}
		if ai != bi {
			return ai < bi
		}
	}
	return len(as) < len(bs)
}

// initdb creates the cluster in a scratch directory and renames it into
// place, so a half-initialised cluster is never mistaken for a real one.
func (c *Cluster) initdb(ctx context.Context) error {
	tmp := filepath.Join(c.dir, initSubdir)
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("pglocal: clear %s: %w", tmp, err)
	}
	began := time.Now()
	if _, err := c.run(ctx, "initdb",
		"-D", tmp,
		"-U", "postgres",
		"--auth=trust",
		"--encoding=UTF8",
		"--locale=C",
		"--no-instructions",
	); err != nil {
		return fmt.Errorf("pglocal: initdb: %w", err)
	}
	conf := "\n# Added by inorder internal/pglocal.\n" +
		"listen_addresses = '127.0.0.1'\n" +
		"max_connections = 200\n" +
		"shared_buffers = 256MB\n" +
		"include_if_exists '" + confName + "'\n"
	f, err := os.OpenFile(filepath.Join(tmp, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("pglocal: open postgresql.conf: %w", err)
	}
	if _, err := f.WriteString(conf); err != nil {
		_ = f.Close()
		return fmt.Errorf("pglocal: write postgresql.conf: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pglocal: write postgresql.conf: %w", err)
	}
	if err := os.Rename(tmp, c.dataDir); err != nil {
		return fmt.Errorf("pglocal: move cluster into place: %w", err)
	}
	c.logger.Info("pglocal: initialised cluster", "elapsed", time.Since(began))
	return nil
}

// start writes the per-start settings (port, socket directory) and starts
// the server with pg_ctl.
func (c *Cluster) start(ctx context.Context, port int) error {
	if port == 0 {
		p, err := freePort()
		if err != nil {
			return err
		}
		port = p
	}
	socketDir := c.dir
	if len(socketDir)+len("/.s.PGSQL.65535") > maxSocketPath {
		c.logger.Warn("pglocal: dir too long for a Unix socket, listening on TCP only")
		socketDir = ""
	}
	conf := fmt.Sprintf("# Written by inorder internal/pglocal at every start.\nport = %d\nunix_socket_directories = %s\n",
		port, confString(socketDir))
	confPath := filepath.Join(c.dataDir, confName)
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("pglocal: write %s: %w", confName, err)
	}
	if c.runAs != nil {
		if err := os.Chown(confPath, int(c.runAs.uid), int(c.runAs.gid)); err != nil {
			return fmt.Errorf("pglocal: chown %s: %w", confName, err)
		}
	}
	began := time.Now()
	logPath := filepath.Join(c.dir, logName)
	if _, err := c.run(ctx, "pg_ctl", "start", "-D", c.dataDir, "-l", logPath, "-w", "-t", "60", "-s"); err != nil {
		return fmt.Errorf("pglocal: start on port %d: %w (log tail: %s)", port, err, tail(logPath, 1024))
	}
	c.port = port
	c.logger.Info("pglocal: started", "port", port, "elapsed", time.Since(began))
	return nil
}

// runningPort reports whether a postmaster is alive for the data directory
// and, if so, its port, both read from postmaster.pid.
func (c *Cluster) runningPort() (int, bool) {
	b, err := os.ReadFile(filepath.Join(c.dataDir, pidName))
	if err != nil {
		return 0, false
	}
	// Line 1 is the PID, line 4 the port.
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || pid <= 0 {
		return 0, false
	}
	port, err := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err != nil || port <= 0 {
		return 0, false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0, false
	}
	return port, true
}

// waitReady polls the server with real connections until one succeeds.
func (c *Cluster) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var lastErr error
	for {
		attemptCtx, attemptCancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(attemptCtx, c.URL())
		if err == nil {
			err = conn.Ping(attemptCtx)
			_ = conn.Close(attemptCtx)
		}
		attemptCancel()
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("pglocal: server on port %d not ready: %w (last error: %w)", c.port, ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// run executes one of the PostgreSQL binaries, as the unprivileged account
// when the process is root, and returns its combined output.
func (c *Cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	// Output goes to a file rather than a pipe: pg_ctl start leaves a
	// daemon behind, and nothing must wait for it to close a pipe.
	out, err := os.CreateTemp("", "pglocal-*.out")
	if err != nil {
		return nil, fmt.Errorf("create output file: %w", err)
	}
	defer func() {
		_ = out.Close()
		_ = os.Remove(out.Name())
	}()
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Dir = c.dir
	cmd.Env = cleanEnv()
	cmd.Stdout = out
	cmd.Stderr = out
	if c.runAs != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: c.runAs.uid, Gid: c.runAs.gid},
		}
	}
	runErr := cmd.Run()
	output, _ := os.ReadFile(out.Name())
	output = bytes.TrimSpace(output)
	if runErr != nil {
		return output, fmt.Errorf("%s: %w: %s", name, runErr, output)
	}
	return output, nil
}

// cleanEnv is the environment minus libpq's PG* variables, which could
// point the binaries at another server or data directory.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// lookupRunAs returns the account to run the binaries as, or nil when the
// process is not root.
func lookupRunAs() (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var lastErr error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			lastErr = err
			continue
		}
		uid, err := strconv.ParseUint(u.Uid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("pglocal: user %s: uid %q: %w", name, u.Uid, err)
		}
		gid, err := strconv.ParseUint(u.Gid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("pglocal: user %s: gid %q: %w", name, u.Gid, err)
		}
		return &account{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("pglocal: running as root and no unprivileged user to run PostgreSQL as: %w", lastErr)
}

// checkSearchable verifies that acct can reach dir: every directory above
// it must grant it search (x) permission.
func checkSearchable(dir string, acct *account) error {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("pglocal: stat %s: %w", p, err)
		}
		mode := st.Mode().Perm()
		ok := mode&0o001 != 0
		if sys, isStat := st.Sys().(*syscall.Stat_t); isStat {
			switch {
			case sys.Uid == acct.uid:
				ok = mode&0o100 != 0
			case sys.Gid == acct.gid:
				ok = mode&0o010 != 0
			}
		}
		if !ok {
			return fmt.Errorf("pglocal: %s is not searchable by user %s, which PostgreSQL runs as; chmod o+x it or choose another dir", p, acct.name)
		}
		if parent := filepath.Dir(p); parent == p {
			return nil
		}
	}
}

// lockFile takes an exclusive flock on path, polling so that ctx can
// cancel the wait. The returned func releases it.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pglocal: open lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("pglocal: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("pglocal: lock %s: %w", path, ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pglocal: pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// confString quotes s as a postgresql.conf string value.
func confString(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// tail returns up to the last n bytes of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
