package esdb_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
	"github.com/inorder/inorder/source/sourcetest"
)

// The child process: TestMain runs childMain instead of the tests when
// childEnv is set.
const (
	childEnv    = "INORDER_ESDB_CHILD"
	childLine   = "inorder-child "
	childName   = "killed"
	childBatch  = 20
	childSchema = "INORDER_ESDB_CHILD_SCHEMA"
	childDB     = "INORDER_ESDB_CHILD_DB"
	childESDB   = "INORDER_ESDB_CHILD_URL"
	childPrefix = "INORDER_ESDB_CHILD_PREFIX"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(childMain())
	}
	sourcetest.Main(m, sourceSubjects()...)
}

// childMain runs a catch-up Source until SIGINT and prints a line per
// committed batch ("inorder-child commit") and per checkpoint saved
// ("inorder-child checkpoint <commit> <prepare>").
func childMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	pool, err := pgxpool.New(ctx, os.Getenv(childDB))
	if err != nil {
		logger.Error("pool", "error", err)
		return 2
	}
	defer pool.Close()
	proc, err := projection.New(pool, &projection.Config{Schema: os.Getenv(childSchema), Logger: logger}, ledger.New(nil))
	if err != nil {
		logger.Error("processor", "error", err)
		return 2
	}
	var mu sync.Mutex
	src, err := esdb.New(&esdb.Config{
		URL: os.Getenv(childESDB), Processor: proc, Name: childName, Logger: logger,
		Workers: 4, BatchSize: childBatch, MaxWait: 5 * time.Millisecond,
		Mapping: esdb.Mapping{StreamPrefix: os.Getenv(childPrefix)},
		OnCommit: func(esdb.Commit) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Printf("%scommit\n", childLine)
		},
		OnCheckpoint: func(p esdbc.Position) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Printf("%scheckpoint %d %d\n", childLine, p.Commit, p.Prepare)
		},
	})
	if err != nil {
		logger.Error("source", "error", err)
		return 2
	}
	if err := src.Run(ctx); err != nil {
		logger.Error("run", "error", err)
		return 1
	}
	return 0
}

// child is a running child process.
type child struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *lockedBuffer
	done   chan error
}

func startChild(t *testing.T, e *env, b *bundle) *child {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1", childDB+"="+b.db.URL, childSchema+"="+b.db.Schema,
		childESDB+"="+e.url, childPrefix+"="+e.prefix)
	c := &child{cmd: cmd, lines: make(chan string, 1024), stderr: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = c.stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), childLine); ok {
				c.lines <- line
			}
		}
		close(c.lines)
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range c.lines {
		}
		<-c.done
		if t.Failed() {
			t.Logf("child stderr:\n%s", c.stderr.String())
		}
		c.done <- nil
	})
	return c
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// next returns the next line, or false once the child's output ended.
func (c *child) next(t *testing.T) (string, bool) {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		return line, ok
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for the child; stderr:\n%s", c.stderr.String())
		return "", false
	}
}

// wait waits for the child to exit and returns its error.
func (c *child) wait(t *testing.T) error {
	t.Helper()
	for range c.lines {
	}
	err := <-c.done
	c.done <- err
	return err
}

func parseCheckpoint(t *testing.T, line string) (esdbc.Position, bool) {
	t.Helper()
	f := strings.Fields(line)
	if len(f) != 3 {
		return esdbc.Position{}, false
	}
	c, err := strconv.ParseUint(f[1], 10, 64)
	require.NoError(t, err)
	p, err := strconv.ParseUint(f[2], 10, 64)
	require.NoError(t, err)
	return esdbc.Position{Commit: c, Prepare: p}, true
}

// SIGKILL mid-stream, then a restart: the second process resumes from the
// committed checkpoint, which only moves forward, and the read model is the
// in-order fold.
func TestSIGKILL(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := setup(t)
	events := generate(5, 200, 10)
	e.appendEvents(t, events)

	first := startChild(t, e, b)
	kill := 1 + rand.IntN(6) // kill after this many commits, of about 100
	t.Logf("killing after %d commits", kill)
	var before []esdbc.Position
	for n := 0; n < kill; {
		line, ok := first.next(t)
		require.True(t, ok, "the child exited early; stderr:\n%s", first.stderr.String())
		if p, ok := parseCheckpoint(t, line); ok {
			before = append(before, p)
		} else {
			n++
		}
	}
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	require.Error(t, first.wait(t), "killed")
	requireForward(t, before)
	killedAt, hadCheckpoint := b.checkpoint(t, childName)
	require.Less(t, b.appliedRows(t), len(events), "killed before the end")

	second := startChild(t, e, b)
	var after []esdbc.Position
	for b.appliedRows(t) < len(events) {
		line, ok := second.next(t)
		require.True(t, ok, "the child exited early; stderr:\n%s", second.stderr.String())
		if p, ok := parseCheckpoint(t, line); ok {
			after = append(after, p)
		}
	}
	require.NoError(t, second.cmd.Process.Signal(os.Interrupt))
	require.NoError(t, second.wait(t), "a graceful stop; stderr:\n%s", second.stderr.String())

	b.requireFold(t, events)
	require.Equal(t, len(events), b.appliedRows(t))
	requireForward(t, after)
	final, ok := b.checkpoint(t, childName)
	require.True(t, ok)
	if hadCheckpoint {
		require.False(t, posLess(final, killedAt))
		if len(after) > 0 {
			require.False(t, posLess(after[0], killedAt), "resumed from the committed checkpoint")
		}
	}
	last := events[len(events)-1]
	require.False(t, posLess(final, e.lastPosition(t, e.stream(last.Aggregate))), "the drain saved the final checkpoint")
}
