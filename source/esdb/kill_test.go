package esdb_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/proctest"
	"github.com/inorder/inorder/source/esdb"
	"github.com/inorder/inorder/source/sourcetest"
)

// The child process: TestMain runs killRole instead of the tests when
// proctest starts the test binary as it.
const (
	killRole    = "killed"
	childName   = "killed"
	childBatch  = 20
	childSchema = "INORDER_ESDB_CHILD_SCHEMA"
	childDB     = "INORDER_ESDB_CHILD_DB"
	childESDB   = "INORDER_ESDB_CHILD_URL"
	childPrefix = "INORDER_ESDB_CHILD_PREFIX"
)

func TestMain(m *testing.M) {
	if os.Getenv(proctest.EnvRole) == killRole {
		proctest.Main(m, map[string]proctest.Role{killRole: killWorker})
	}
	sourcetest.Main(m, sourceSubjects()...)
}

// killWorker runs a catch-up Source until SIGINT and says a line per
// committed batch ("commit") and per checkpoint saved ("checkpoint <commit>
// <prepare>").
func killWorker(ctx context.Context, c *proctest.Child) error {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	proc, done, err := ledgertest.OpenProcessor(ctx, c.Getenv(childDB), c.Getenv(childSchema), logger)
	if err != nil {
		return err
	}
	defer done()
	src, err := esdb.New(&esdb.Config{
		URL: c.Getenv(childESDB), Processor: proc, Name: childName, Logger: logger,
		Workers: 4, BatchSize: childBatch, MaxWait: 5 * time.Millisecond,
		Mapping:      esdb.Mapping{StreamPrefix: c.Getenv(childPrefix)},
		OnCommit:     func(esdb.Commit) { c.Say("commit") },
		OnCheckpoint: func(p esdbc.Position) { c.Say("checkpoint", p.Commit, p.Prepare) },
	})
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	if err := src.Run(ctx); err != nil {
		return fmt.Errorf("run: %w", err)
	}
	return nil
}

// startChild starts a killWorker on e's server and b's schema.
func startChild(t *testing.T, e *env, b *bundle) *proctest.Proc {
	t.Helper()
	return proctest.Start(t, killRole, proctest.Options{Timeout: waitTimeout, Env: map[string]string{
		childDB: b.DB.URL, childSchema: b.DB.Schema, childESDB: e.url, childPrefix: e.prefix}})
}

// parseCheckpoint returns the position of a "checkpoint" line, false for
// any other.
func parseCheckpoint(t *testing.T, m proctest.Msg) (esdbc.Position, bool) {
	t.Helper()
	if m.Kind != "checkpoint" {
		return esdbc.Position{}, false
	}
	f := strings.Fields(m.Payload)
	require.Len(t, f, 2, "checkpoint %q", m.Payload)
	c, err := strconv.ParseUint(f[0], 10, 64)
	require.NoError(t, err)
	p, err := strconv.ParseUint(f[1], 10, 64)
	require.NoError(t, err)
	return esdbc.Position{Commit: c, Prepare: p}, true
}

// SIGKILL mid-stream, then a restart: the second process resumes from the
// committed checkpoint, which only moves forward, and the read model is the
// in-order fold.
func TestSIGKILL(t *testing.T) {
	t.Parallel()
	e, b, events := appended(t, 5, 200, 10)

	first := startChild(t, e, b)
	kill := 1 + rand.IntN(6) // kill after this many commits, of about 100
	t.Logf("killing after %d commits", kill)
	var before []esdbc.Position
	for n := 0; n < kill; {
		m, ok := first.Next(t)
		require.True(t, ok, "the child exited early; output:\n%s", first.Output())
		if p, ok := parseCheckpoint(t, m); ok {
			before = append(before, p)
		} else {
			n++
		}
	}
	first.Kill(t) // requires that it died of SIGKILL
	requireForward(t, before)
	killedAt, hadCheckpoint := b.checkpoint(t, childName)
	require.Less(t, b.appliedRows(t), len(events), "killed before the end")

	second := startChild(t, e, b)
	var after []esdbc.Position
	for b.appliedRows(t) < len(events) {
		m, ok := second.Next(t)
		require.True(t, ok, "the child exited early; output:\n%s", second.Output())
		if p, ok := parseCheckpoint(t, m); ok {
			after = append(after, p)
		}
	}
	second.Interrupt(t)
	second.RequireExit(t) // a graceful stop

	b.RequireFold(t, events)
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
