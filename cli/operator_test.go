package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/migrations"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/esdb"
)

// toggle is a per-event projection that writes nothing and fails, while
// failing is on, on every event of aggregates with the prefix "bad-".
type toggle struct{ failing atomic.Bool }

func (*toggle) Name() string { return "toggle" }

func (t *toggle) Apply(_ context.Context, _ *projection.Tx, e aggregate.Event) error {
	if t.failing.Load() && strings.HasPrefix(e.Aggregate, "bad-") {
		return fmt.Errorf("toggle: refusing %s v%d", e.Aggregate, e.Version)
	}
	return nil
}

// bundle is a migrated schema with a processor (to seed state) and the CLI
// configured on the same projections.
type bundle struct {
	db     *pgtest.DB
	ledger *ledger.Projection
	toggle *toggle
	proc   *projection.Processor
	cfg    cli.Config
	env    map[string]string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{db: pgtest.NewMigrated(t), ledger: ledger.New(nil), toggle: &toggle{}}
	pcfg := projection.Config{MaxAttempts: 2, RetryBackoff: time.Millisecond}
	b.cfg = cli.Config{Projections: []projection.Projection{b.ledger, b.toggle}, Sources: []source.Driver{esdb.Driver()}, Processor: pcfg}
	pcfg.Schema = b.db.Schema
	var err error
	b.proc, err = projection.New(b.db.Pool, &pcfg, b.ledger, b.toggle)
	require.NoError(t, err)
	require.NoError(t, b.proc.Setup(t.Context()))
	b.env = map[string]string{"DATABASE_URL": b.db.URL, "INORDER_SCHEMA": b.db.Schema}
	return b
}

// run runs a command line in-process and returns its stdout and stderr.
func (b *bundle) run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cfg := b.cfg
	cfg.Stdout, cfg.Stderr = &stdout, &stderr
	cfg.Getenv = func(k string) string { return b.env[k] }
	err := cli.Run(t.Context(), cfg, args)
	return stdout.String(), stderr.String(), err
}

// runOK runs a command line that must succeed and returns its stdout.
func (b *bundle) runOK(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := b.run(t, args...)
	require.NoError(t, err, "inorder %s\nstderr: %s", strings.Join(args, " "), errOut)
	return out
}

// runJSON runs a command line with --json and decodes its output into v.
func (b *bundle) runJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out := b.runOK(t, append(args, "--json")...)
	require.NoError(t, json.Unmarshal([]byte(out), v), "output: %s", out)
}

// unmigrated returns a bundle on an empty schema (no migration, no
// processor) whose command line has the ledger and the source drivers.
func unmigrated(t *testing.T, drivers ...source.Driver) *bundle {
	t.Helper()
	db := pgtest.New(t)
	return &bundle{db: db, cfg: cli.Config{Projections: []projection.Projection{ledger.New(nil)}, Sources: drivers},
		env: map[string]string{"DATABASE_URL": db.URL, "INORDER_SCHEMA": db.Schema}}
}

func (b *bundle) process(t *testing.T, events ...aggregate.Event) []projection.Result {
	t.Helper()
	res, err := b.proc.Process(t.Context(), projection.Batch{Events: events, Source: "test"})
	require.NoError(t, err)
	return res
}

// event is a ledger event.
var event = ledgertest.Event

func authorized(t *testing.T, agg string) aggregate.Event {
	return event(t, agg, 1, ledger.Authorized, ledger.Data{Payer: "customer-1", Payee: "merchant-1", Amount: 1000})
}

func TestOperatorCommands(t *testing.T) {
	t.Parallel()

	t.Run("Status", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.process(t, authorized(t, "pay-1"), event(t, "pay-1", 2, ledger.Captured, ledger.Data{Amount: 400}),
			event(t, "pay-2", 3, ledger.Approved, ledger.Data{}))

		var rep projection.Status
		b.runJSON(t, &rep, "status")
		require.Len(t, rep.Projections, 2)
		for _, p := range rep.Projections {
			require.Equal(t, int64(2), p.Aggregates, p.Name)
			require.Equal(t, int64(2), p.Events, p.Name)
			require.Equal(t, int64(1), p.Parked, p.Name)
			require.Equal(t, int64(1), p.ParkedAggregates, p.Name)
			require.False(t, p.OldestParked.IsZero())
		}
		require.Zero(t, rep.Rejected.Total)

		out := b.runOK(t, "status")
		require.Regexp(t, `(?m)^PROJECTION\s+AGGREGATES\s+EVENTS\s+PARKED`, out)
		require.Regexp(t, `(?m)^ledger\s+2\s+2\s+1\s+1\s`, out)
		require.Contains(t, out, "rejected deliveries: 0")
	})

	t.Run("StatusOwner", func(t *testing.T) {
		// A fenced owner (--owner) of the ledger's key is named until it
		// ends its lease.
		t.Parallel()
		b := setup(t)
		owner, err := projection.New(b.db.Pool, &projection.Config{Schema: b.db.Schema, Owner: true}, b.ledger)
		require.NoError(t, err)
		_, err = owner.Process(t.Context(), projection.Batch{Events: []aggregate.Event{authorized(t, "pay-1")}})
		require.NoError(t, err)
		host, _ := os.Hostname()
		out := b.runOK(t, "status")
		require.Regexp(t, `(?m)^owner: ledger is owned by `+regexp.QuoteMeta(fmt.Sprintf("%s:%d", host, os.Getpid()))+` \(--owner; token 1, `, out)
		require.NotContains(t, out, "owner: toggle")
		require.NoError(t, owner.Close(t.Context()))
		require.NotContains(t, b.runOK(t, "status"), "owner:")
	})

	t.Run("ParkedNextIsParked", func(t *testing.T) {
		// An aggregate whose next version is parked, not drained: what the
		// fence's race (fixed 6 Dec) left behind under an owner. Another
		// writer parks version 2, its bump of the lease is undone here (the
		// race lost it), and the owner applies version 1 without its guard.
		// The list must not say it waits for version 2, which is parked.
		t.Parallel()
		b := setup(t)
		owner, err := projection.New(b.db.Pool, &projection.Config{Schema: b.db.Schema, Owner: true}, b.ledger)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, owner.Close(context.Background())) })
		_, err = owner.Process(t.Context(), projection.Batch{Events: []aggregate.Event{authorized(t, "pay-0")}})
		require.NoError(t, err)
		b.process(t, event(t, "pay-1", 2, ledger.Approved, ledger.Data{}))
		_, err = b.db.Pool.Exec(t.Context(), `UPDATE owners SET foreign_n = foreign_n - 1 WHERE gate_key = 'ledger'`)
		require.NoError(t, err)
		_, err = owner.Process(t.Context(), projection.Batch{Events: []aggregate.Event{authorized(t, "pay-1")}})
		require.NoError(t, err)
		out := b.runOK(t, "parked", "list", "--projection", "ledger")
		require.Regexp(t, `(?m)^ledger\s+1\s+pay-1\s+1\s+nothing \(next is parked\)\s+1\s+2-2\s`, out)
	})

	t.Run("Parked", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.process(t, authorized(t, "pay-1"), event(t, "pay-1", 4, ledger.Approved, ledger.Data{}),
			event(t, "pay-1", 5, ledger.Voided, ledger.Data{}))

		var waiting []projection.WaitingEntry
		b.runJSON(t, &waiting, "parked", "list", "--projection", "ledger")
		require.Len(t, waiting, 1)
		w := waiting[0]
		require.Equal(t, "pay-1", w.Aggregate)
		require.Equal(t, int64(1), w.Current)
		require.Equal(t, [2]int64{2, 3}, [2]int64{w.MissingFrom, w.MissingTo})
		require.Equal(t, int64(2), w.Parked)
		require.Equal(t, [2]int64{4, 5}, [2]int64{w.MinVersion, w.MaxVersion})

		out := b.runOK(t, "parked", "list")
		require.Regexp(t, `(?m)^ledger\s+1\s+pay-1\s+1\s+2-3\s+2\s+4-5\s`, out)
		require.Regexp(t, `(?m)^toggle\s+1\s+pay-1\s+1\s+2-3\s+2\s+4-5\s`, out)

		var parked []projection.ParkedEntry
		b.runJSON(t, &parked, "parked", "show", "pay-1", "--projection", "toggle")
		require.Len(t, parked, 2)
		require.Equal(t, []int64{4, 5}, []int64{parked[0].Version, parked[1].Version})
		require.Equal(t, ledger.Voided, parked[1].Type)
		require.JSONEq(t, `{}`, string(parked[0].Data), "data is shown as JSON")

		out = b.runOK(t, "parked", "show", "pay-1", "--projection", "toggle")
		require.Regexp(t, `(?m)^toggle\s+1\s+1\s+5\s+pay-1:5\s+payment.voided\s+.*\s\{\}\s*$`, out, "data printed as JSON")
		require.NotContains(t, out, "[123", "not as a Go byte slice")

		out = b.runOK(t, "parked", "show", "pay-nothing")
		require.Contains(t, out, "no parked events")

		// The versions 2 and 3 will never come: declare them missing in
		// the projection that can live without them.
		_, _, err := b.run(t, "parked", "declare-gap", "pay-1", "--to", "3")
		require.ErrorIs(t, err, cli.ErrUsage, "a projection and a reason are required")
		_, _, err = b.run(t, "parked", "declare-gap", "pay-1", "--to", "3", "--projection", "toggle")
		require.ErrorIs(t, err, cli.ErrUsage, "a reason is required")
		_, _, err = b.run(t, "parked", "declare-gap", "pay-1", "--to", "4", "--projection", "toggle", "--reason", "x")
		require.Error(t, err, "version 4 is parked")
		require.ErrorIs(t, err, projection.ErrBadGap)

		// A dry run says what would happen and changes nothing.
		out = b.runOK(t, "parked", "declare-gap", "pay-1", "--to", "3", "--projection", "toggle", "--reason", "truncated stream", "--dry-run")
		require.Equal(t, "dry run, nothing changed: declare-gap: toggle generation 1 pay-1: would be: versions 2-3 declared missing, "+
			"2 parked events applied behind it; version 1 -> 5\n", out)
		v, err := b.proc.Version(t.Context(), "toggle", "pay-1")
		require.NoError(t, err)
		require.Equal(t, int64(1), v, "the dry run changed nothing")
		_, _, err = b.run(t, "parked", "declare-gap", "pay-1", "--to", "3", "--projection", "toggle", "--reason", "x", "--generation", "2")
		require.ErrorIs(t, err, projection.ErrNoGeneration)

		var act map[string]any
		b.runJSON(t, &act, "parked", "declare-gap", "pay-1", "--to", "3", "--projection", "toggle", "--reason", "truncated stream", "--by", "alice")
		require.Equal(t, "declare-gap", act["action"])
		require.EqualValues(t, 1, act["before"])
		require.EqualValues(t, 5, act["after"], "the parked successors drained")
		v, err = b.proc.Version(t.Context(), "ledger", "pay-1")
		require.NoError(t, err)
		require.Equal(t, int64(1), v, "the other projection is untouched")

		var logged, by string
		var gen int
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT reason, actor, generation FROM operator_log WHERE action = 'declare-gap'`).Scan(&logged, &by, &gen))
		require.Equal(t, "truncated stream", logged)
		require.Equal(t, "alice", by)
		require.Equal(t, 1, gen)
	})

	t.Run("Quarantine", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.toggle.failing.Store(true)
		b.process(t, authorized(t, "bad-1"), authorized(t, "pay-1"), authorized(t, "bad-2"))
		b.process(t, event(t, "bad-1", 2, ledger.Approved, ledger.Data{}))

		var qs []projection.QuarantineEntry
		b.runJSON(t, &qs, "quarantine", "list")
		require.Len(t, qs, 2)
		require.ElementsMatch(t, []string{"bad-1", "bad-2"}, []string{qs[0].Aggregate, qs[1].Aggregate})
		for _, q := range qs {
			require.Equal(t, "toggle", q.Projection)
			require.Equal(t, int64(1), q.Version)
			require.Contains(t, q.Error, "toggle: refusing")
			require.Equal(t, ledger.Authorized, q.Type)
		}
		out := b.runOK(t, "quarantine", "list", "--aggregate", "bad-1")
		require.Regexp(t, `(?m)^toggle\s+1\s+bad-1\s+1\s+payment.authorized\s`, out)
		require.NotContains(t, out, "bad-2")

		// Still failing: the retry fails and the event stays.
		_, _, err := b.run(t, "quarantine", "retry", "bad-1", "--projection", "toggle")
		require.ErrorContains(t, err, "still fails")
		require.Equal(t, "the event still fails and stays quarantined: projection toggle: aggregate bad-1 version 1: toggle: refusing bad-1 v1",
			err.Error(), "each layer says only what it knows, once")
		var herr *projection.HandlerError
		require.ErrorAs(t, err, &herr)

		b.toggle.failing.Store(false)
		var act map[string]any
		b.runJSON(t, &act, "quarantine", "retry", "bad-1", "--projection", "toggle")
		require.EqualValues(t, 0, act["before"])
		require.EqualValues(t, 2, act["after"], "retried, then drained the parked version 2")

		_, _, err = b.run(t, "quarantine", "skip", "bad-2", "--projection", "toggle")
		require.ErrorIs(t, err, cli.ErrUsage, "skip needs a reason")
		out = b.runOK(t, "quarantine", "skip", "bad-2", "--projection", "toggle", "--reason", "bad data")
		require.Contains(t, out, "skip: toggle generation 1 bad-2: quarantined event (version 1) skipped")
		require.Contains(t, out, "version 0 -> 1")

		_, _, err = b.run(t, "quarantine", "skip", "bad-2", "--projection", "toggle", "--reason", "again")
		require.ErrorIs(t, err, projection.ErrNotQuarantined)

		b.runJSON(t, &qs, "quarantine", "list")
		require.Empty(t, qs)
	})

	t.Run("Conflicts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.process(t, authorized(t, "pay-1"))
		other := event(t, "pay-1", 1, ledger.Authorized, ledger.Data{Payer: "mallory", Payee: "merchant-1", Amount: 9})
		b.process(t, other)
		b.process(t, other)

		var cs []projection.ConflictEntry
		b.runJSON(t, &cs, "conflicts", "list", "--projection", "ledger")
		require.Len(t, cs, 1)
		c := cs[0]
		require.Equal(t, "pay-1", c.Aggregate)
		require.Equal(t, int64(1), c.Version)
		require.Equal(t, "applied", c.ExistingState)
		require.Equal(t, int64(2), c.Count)
		var data map[string]any
		require.NoError(t, json.Unmarshal(c.Data, &data))
		require.Equal(t, "mallory", data["payer"])

		b.runJSON(t, &cs, "conflicts", "list", "--after-id", strconv.FormatInt(c.ID, 10))
		require.Len(t, cs, 1)
		require.Equal(t, "toggle", cs[0].Projection)
		require.Greater(t, cs[0].ID, c.ID)

		out := b.runOK(t, "conflicts", "list")
		// The inline ledger's row logs entries, not ids: the existing id is
		// unknown ("-"); the toggle projection keeps version rows.
		require.Regexp(t, `(?m)^\d+\s+ledger\s+1\s+pay-1\s+1\s+applied\s+-\s+pay-1:1\s+payment.authorized\s+2\s.*\sno$`, out)

		// Acknowledge: no longer open, in the status and the listing.
		id := strconv.FormatInt(c.ID, 10)
		_, _, err := b.run(t, "conflicts", "ack", id)
		require.ErrorIs(t, err, cli.ErrUsage, "a reason is required")
		_, _, err = b.run(t, "conflicts", "ack", "999999", "--reason", "x")
		require.ErrorIs(t, err, projection.ErrNotFound)
		out = b.runOK(t, "conflicts", "ack", id, "--reason", "producer fixed, OPS-7", "--dry-run")
		require.Contains(t, out, "dry run, nothing changed: ack-conflict: ledger generation 1 pay-1 #"+id)
		out = b.runOK(t, "conflicts", "ack", id, "--reason", "producer fixed, OPS-7", "--by", "bob")
		require.Equal(t, "ack-conflict: ledger generation 1 pay-1 #"+id+": conflict "+id+" acknowledged\n", out)
		var st projection.Status
		b.runJSON(t, &st, "status")
		require.Equal(t, int64(0), st.Projections[0].Conflicts, "ledger: acknowledged")
		require.Equal(t, int64(1), st.Projections[0].ConflictsAcknowledged)
		require.Equal(t, int64(1), st.Projections[1].Conflicts, "toggle: still open")
		b.runJSON(t, &cs, "conflicts", "list", "--open")
		require.Len(t, cs, 1)
		require.Equal(t, "toggle", cs[0].Projection)

		// The same conflicting event again: counted, not reopened.
		b.process(t, other)
		b.runJSON(t, &st, "status")
		require.Equal(t, int64(0), st.Projections[0].Conflicts, "still acknowledged")

		// The operator log has the decision.
		var log []projection.OperatorLogEntry
		b.runJSON(t, &log, "oplog", "--action", "ack-conflict")
		require.Len(t, log, 1)
		require.Equal(t, "ledger", log[0].Projection)
		require.Equal(t, "producer fixed, OPS-7", log[0].Reason)
		out = b.runOK(t, "oplog", "--projection", "ledger")
		require.Regexp(t, `(?m)^\d+\s+\S+\s+ack-conflict\s+ledger\s+1\s+pay-1\s+1\s+producer fixed, OPS-7\s+bob$`, out)
		out = b.runOK(t, "oplog", "--projection", "toggle")
		require.Equal(t, "the operator log is empty\n", out)
	})

	t.Run("Rejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.process(t, authorized(t, "pay-1"), aggregate.Event{Aggregate: "pay-1", Version: 2, Type: ledger.Approved, Data: []byte("{not json")})
		// A processor that accepts authorizations only rejects the
		// approval; the CLI's processor accepts every type.
		strict, err := projection.New(b.db.Pool, &projection.Config{Schema: b.db.Schema, Limits: aggregate.Limits{Types: []string{ledger.Authorized}}}, b.ledger, b.toggle)
		require.NoError(t, err)
		_, err = strict.Process(t.Context(), projection.Batch{Events: []aggregate.Event{event(t, "pay-1", 2, ledger.Approved, ledger.Data{})}, Source: "strict"})
		require.NoError(t, err)

		var rs []projection.RejectedEntry
		b.runJSON(t, &rs, "rejected", "list")
		require.Len(t, rs, 2)
		require.Equal(t, "invalid_json", rs[0].Reason)
		invalid := strconv.FormatInt(rs[0].ID, 10)
		require.Equal(t, "{not json", string(rs[0].Data), "invalid data is shown in base64 and decoded")
		require.Equal(t, "unknown_type", rs[1].Reason)
		require.Equal(t, "strict", rs[1].Source)

		out := b.runOK(t, "rejected", "list", "--limit", "1")
		require.Regexp(t, `(?m)^\d+\s+pay-1\s+2\s+payment.approved\s+invalid_json\s+1\s`, out)
		require.NotContains(t, out, "unknown_type")

		_, _, err = b.run(t, "rejected", "replay", strconv.FormatInt(rs[0].ID, 10))
		var verr *aggregate.ValidationError
		require.ErrorAs(t, err, &verr, "still invalid")

		var res projection.ActionReport
		b.runJSON(t, &res, "rejected", "replay", strconv.FormatInt(rs[1].ID, 10), "--dry-run")
		require.True(t, res.DryRun)
		require.Equal(t, map[string]string{"ledger": "applied", "toggle": "applied"}, res.Outcomes, "what it would become")
		var dry projection.Status
		b.runJSON(t, &dry, "status")
		require.Equal(t, projection.RejectedCounts{Total: 2, Pending: 2}, dry.Rejected, "a dry run replays nothing")
		b.runJSON(t, &res, "rejected", "replay", strconv.FormatInt(rs[1].ID, 10))
		require.False(t, res.DryRun)
		require.Equal(t, map[string]string{"ledger": "applied", "toggle": "applied"}, res.Outcomes)

		b.runJSON(t, &rs, "rejected", "list", "--after-id", strconv.FormatInt(rs[0].ID, 10))
		require.Len(t, rs, 1)
		require.False(t, rs[0].ReplayedAt.IsZero())

		var rep projection.Status
		b.runJSON(t, &rep, "status")
		require.Equal(t, projection.RejectedCounts{Total: 2, Pending: 1}, rep.Rejected)

		// The one still invalid: dismissed, with a reason.
		_, _, err = b.run(t, "rejected", "dismiss", invalid)
		require.ErrorIs(t, err, cli.ErrUsage, "a reason is required")
		out = b.runOK(t, "rejected", "dismiss", invalid, "--reason", "garbage from a test producer")
		require.Contains(t, out, "dismissed")
		b.runJSON(t, &rep, "status")
		require.Equal(t, projection.RejectedCounts{Total: 2, Pending: 0}, rep.Rejected)
		out = b.runOK(t, "rejected", "list")
		require.Regexp(t, `(?m)^\d+\s+pay-1\s+2\s+payment.approved\s+invalid_json\s+1\s+\S+ ago\s+dismissed `, out)
		b.runJSON(t, &rs, "rejected", "list", "--pending")
		require.Empty(t, rs)
	})

	t.Run("MigrateOfflineRefused", func(t *testing.T) {
		t.Parallel()
		b := unmigrated(t, esdb.Driver())
		db := b.db
		b.runOK(t, "migrate")
		// Back to before 007_operator, the newest offline migration.
		m, err := migrations.New(db.Pool, &migrations.Options{Schema: db.Schema})
		require.NoError(t, err)
		st, err := m.Status(t.Context())
		require.NoError(t, err)
		require.False(t, st[6].Online)
		_, err = m.Rollback(t.Context(), len(st)-6)
		require.NoError(t, err)

		worker, err := migrations.Announce(t.Context(), db.Pool, db.Schema, nil)
		require.NoError(t, err)
		defer worker.Close()
		out := b.runOK(t, "migrate", "--dry-run")
		require.Contains(t, out, "would apply 007_operator to schema "+db.Schema+" (offline)")
		require.Contains(t, out, "1 inorder worker session(s) connected: the offline migrations would be refused")
		_, _, err = b.run(t, "migrate")
		require.ErrorIs(t, err, migrations.ErrWorkersConnected)
		require.ErrorContains(t, err, "007_operator is offline and 1 inorder worker session(s) are connected")
		_, _, err = b.run(t, "run", "--migrate", "--source", "esdb://127.0.0.1:1")
		require.ErrorIs(t, err, migrations.ErrWorkersConnected)
		require.ErrorContains(t, err, "migrate --force")
		out = b.runOK(t, "migrate", "status")
		require.Regexp(t, `(?m)^007\s+operator\s+offline\s+pending\s+-\s*$`, out, "the refusal applied nothing")

		out = b.runOK(t, "migrate", "--force")
		require.Contains(t, out, "applied 007_operator to schema "+db.Schema)
		require.Contains(t, out, "(offline)")
	})

	t.Run("NewerOnlineMigration", func(t *testing.T) {
		t.Parallel()
		b := unmigrated(t)
		db := b.db
		b.runOK(t, "migrate")
		_, err := db.Pool.Exec(t.Context(), "INSERT INTO schema_migrations (version, name, online) VALUES (900, 'newer_column', true)")
		require.NoError(t, err)
		b.runOK(t, "status") // works beside a newer release's online migration
		out := b.runOK(t, "migrate", "status")
		require.Regexp(t, `(?m)^900\s+newer_column\s+online\s+unknown to this binary\s`, out)
		_, err = db.Pool.Exec(t.Context(), "INSERT INTO schema_migrations (version, name) VALUES (901, 'newer_unrecorded')")
		require.NoError(t, err)
		_, _, err = b.run(t, "status")
		require.ErrorIs(t, err, migrations.ErrUnknownVersion)
		require.ErrorContains(t, err, "migration 901")
	})

	t.Run("Migrate", func(t *testing.T) {
		t.Parallel()
		b := unmigrated(t)
		db := b.db

		_, _, err := b.run(t, "status")
		require.Regexp(t, `pending migrations: run 'inorder migrate --schema \S+' first$`, err.Error())
		require.NotContains(t, err.Error(), "--migrate", "status has no --migrate flag to offer")

		b.env["INORDER_SCHEMA"] = db.Schema + "_missing"
		_, _, err = b.run(t, "status")
		require.ErrorContains(t, err, `schema "`+db.Schema+`_missing" does not exist: run 'inorder migrate`)
		b.env["INORDER_SCHEMA"] = db.Schema

		var st map[string]any
		b.runJSON(t, &st, "migrate", "status")
		require.Equal(t, false, st["migrations"].([]any)[0].(map[string]any)["applied"])

		var res struct {
			DryRun bool `json:"dry_run"`
			Steps  []struct {
				Version int    `json:"version"`
				Name    string `json:"name"`
			} `json:"steps"`
			Setup bool `json:"projections_setup"`
		}
		b.runJSON(t, &res, "migrate", "--dry-run")
		require.True(t, res.DryRun)
		require.Equal(t, 1, res.Steps[0].Version)
		require.False(t, res.Setup)
		var tables int
		require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, db.Schema).Scan(&tables))
		require.Zero(t, tables, "a dry run changes nothing")

		out := b.runOK(t, "migrate")
		require.Contains(t, out, "applied 001_init to schema "+db.Schema)
		require.Contains(t, out, "read-model tables ready")
		require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'ledger_%'`, db.Schema).Scan(&tables))
		require.Equal(t, 3, tables)

		out = b.runOK(t, "migrate")
		require.Contains(t, out, "is up to date")
		out = b.runOK(t, "migrate", "status")
		require.Regexp(t, `(?m)^001\s+init\s+online\s+applied\s+\d{4}-`, out)
		require.Regexp(t, `(?m)^006\s+effects_pending\s+offline\s+applied\s+\d{4}-`, out)
	})
}

func TestUsage(t *testing.T) {
	t.Parallel()
	b := &bundle{cfg: cli.Config{Projections: []projection.Projection{ledger.New(nil), &toggle{}}, Sources: []source.Driver{esdb.Driver()}},
		env: map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/x"}}

	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{name: "NoCommand", args: nil, want: "missing command"},
		{name: "UnknownCommand", args: []string{"frobnicate"}, want: `unknown command "frobnicate"`},
		{name: "UnknownSubcommand", args: []string{"parked", "eat"}, want: `unknown command "eat"`},
		{name: "UnknownFlag", args: []string{"status", "--frob"}, want: "unknown flag: --frob"},
		{name: "MissingArgument", args: []string{"parked", "show"}, want: "missing aggregate"},
		{name: "ExtraArgument", args: []string{"status", "x"}, want: `unexpected argument "x"`},
		{name: "UnknownProjection", args: []string{"quarantine", "retry", "a", "--projection", "nope"}, want: `unknown projection "nope"`},
		{name: "AmbiguousProjection", args: []string{"quarantine", "retry", "a"}, want: "--projection is required"},
		{name: "BadID", args: []string{"rejected", "replay", "x'; DROP TABLE versions; --"}, want: "invalid id"},
		{name: "BadEnv", args: []string{"status"}, env: map[string]string{"INORDER_LOG_FORMAT": "xml", "DATABASE_URL": "postgres://x"}, want: "--log-format must be text or json"},
		{name: "BadEnvType", args: []string{"serve"}, env: map[string]string{"INORDER_HTTP_MAX_WAIT": "soon"}, want: `invalid $INORDER_HTTP_MAX_WAIT="soon"`},
		{name: "NoDatabase", args: []string{"status"}, env: map[string]string{}, want: "no database: set --database-url or $DATABASE_URL"},
		{name: "FlagAfterArgument", args: []string{"parked", "show", "a", "--limit", "0"}, want: "--limit must be at least 1"},
		{name: "BadTypeRegex", args: []string{"run", "--esdb-url", "esdb://127.0.0.1:1?tls=false", "--type-regex", "("}, want: "invalid --type-regex"},
		{name: "NoSource", args: []string{"run"}, want: "no source: set --source (esdb://, esdb+discover://, kurrentdb://, kurrentdb+discover://) or $INORDER_SOURCE"},
		{name: "UnknownScheme", args: []string{"run", "--source", "nats://127.0.0.1:4222"}, want: "no source for nats:// URLs; this binary reads esdb://"},
		{name: "SourceWinsOverESDBURL", args: []string{"run", "--source", "nats://x:1", "--esdb-url", "esdb://b:1?tls=false"}, want: "no source for nats:// URLs"},
		{name: "BadSourceURL", args: []string{"run", "--source", "kurrentdb://127.0.0.1:1?tls=maybe"}, want: "EventStoreDB source: invalid EventStoreDB URL"},
		{name: "SourceFlagOfRun", args: []string{"rebuild", "ledger", "--source", "esdb://127.0.0.1:1?tls=false", "--mode", "persistent"}, want: "unknown flag: --mode"},
		{name: "RebuildWithoutYes", args: []string{"rebuild", "ledger", "--in-place", "--esdb-url", "esdb://127.0.0.1:1?tls=false"}, want: "pass --yes to confirm"},
		{name: "DropWithoutYes", args: []string{"rebuild", "drop", "ledger", "--generation", "2"}, want: "pass --yes to confirm"},
		{name: "DropWithoutGeneration", args: []string{"rebuild", "drop", "ledger", "--yes"}, want: "--generation is required"},
		{name: "AckWithoutID", args: []string{"conflicts", "ack", "--reason", "x"}, want: "missing conflict id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			bb := *b
			if tt.env != nil {
				bb.env = tt.env
			}
			_, _, err := bb.run(t, tt.args...)
			require.ErrorIs(t, err, cli.ErrUsage)
			require.ErrorContains(t, err, tt.want)
		})
	}

	t.Run("Help", func(t *testing.T) {
		t.Parallel()
		out, _, err := b.run(t, "--help")
		require.NoError(t, err)
		for _, c := range []string{"migrate", "run", "serve", "status", "parked", "quarantine", "conflicts", "rejected", "rebuild"} {
			require.Regexp(t, `(?m)^  `+c+`\s`, out)
		}
		require.NotContains(t, out, "demo", "no Demo configured")

		out, _, err = b.run(t, "quarantine", "skip", "--help")
		require.NoError(t, err)
		require.Contains(t, out, "Usage:\n  inorder quarantine skip <aggregate> [flags]")
		require.Contains(t, out, "Changes:")
		require.Regexp(t, `--database-url URL\s+PostgreSQL connection URL.*\[\$DATABASE_URL\]`, out)
	})
}
