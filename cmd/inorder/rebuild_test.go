package main_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/cli"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/projection"
)

// genPhase returns the state and phase of a generation of the ledger ("",
// "" when it does not exist).
func (e *env) genPhase(t *testing.T, gen int) (state, phase string) {
	t.Helper()
	err := e.db.Pool.QueryRow(t.Context(), `SELECT state, phase FROM generations WHERE projection = 'ledger' AND generation = $1`, gen).
		Scan(&state, &phase)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ""
	}
	require.NoError(t, err)
	return state, phase
}

// genModel loads the ledger of a generation's schema ("": generation 1).
func (e *env) genModel(t *testing.T, schema string) *ledger.Model {
	t.Helper()
	return ledgertest.LoadIn(t, e.db, ledger.New(nil), schema)
}

// TestRebuildSideBySide rebuilds the ledger side by side while two worker
// processes consume a persistent subscription (competing, with
// subscriptions dropped now and then: deliveries shuffled and duplicated),
// events keep being appended and a reader hammers the HTTP API. A second
// rebuild process asking at the same time is turned away; the rebuild is
// killed with SIGKILL in its replay, its catch-up and its verification (or
// switch) and resumed each time. The live generation serves every read
// throughout, and at the end both generations equal the in-order fold of
// everything appended.
func TestRebuildSideBySide(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.run(t, "migrate")
	var mu sync.Mutex
	all := e.workload(t, 11, 0, 1500, 5)
	workers := []string{"run", "--mode", "persistent", "--group", "e2e", "--workers", "2", "--batch-size", "20",
		"--buffer-size", "16", "--max-wait", "5ms"}
	reader := e.start(t, append(workers, "--http-addr", "127.0.0.1:0")...)
	e.start(t, append(workers, "--http-addr", "")...)
	base := reader.baseURL(t)
	e.waitApplied(t, int64(len(all)), 2*time.Minute)

	// Appends go on, and subscriptions drop now and then, until stopped.
	stopAppending := make(chan struct{})
	appended := make(chan struct{})
	go func() {
		defer close(appended)
		for i := 0; ; i++ {
			select {
			case <-stopAppending:
				return
			case <-time.After(50 * time.Millisecond):
			}
			w := e.workload(t, uint64(100+i), 10_000+100*i, 5, 5)
			mu.Lock()
			all = append(all, w...)
			mu.Unlock()
			if i%10 == 9 {
				e.esdb.DropSubscriptions()
			}
		}
	}()
	// The reader: every answer is a payment at the version it says.
	stopReading := make(chan struct{})
	readErr := make(chan error, 1)
	var reads int
	go func() {
		rng := rand.New(rand.NewPCG(12, 13))
		for {
			select {
			case <-stopReading:
				readErr <- nil
				return
			default:
			}
			id := "pay-" + leftPad(rng.IntN(1500))
			resp, err := http.Get(base + "/v1/projections/ledger/aggregates/" + id)
			if err != nil {
				readErr <- err
				return
			}
			var body struct {
				Version int64 `json:"version"`
				Data    struct {
					ID      string `json:"id"`
					Version int64  `json:"version"`
				} `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			hv, _ := strconv.ParseInt(resp.Header.Get("Inorder-Version"), 10, 64)
			switch {
			case resp.StatusCode != http.StatusOK:
				readErr <- errors.New(id + ": status " + resp.Status)
				return
			case err != nil:
				readErr <- err
				return
			case body.Data.ID != id || body.Version != 5 || body.Data.Version != 5 || hv != 5:
				readErr <- errors.New(id + ": not the payment at its last version")
				return
			}
			reads++
		}
	}()

	rebuild := []string{"rebuild", "ledger", "--replay-batch-size", "200", "--catch-up-events", "5", "--verify-timeout", "5m"}
	asked := false // a second process asked during the replay
	killIn := func(phase string) bool {
		p := e.start(t, rebuild...)
		deadline := time.Now().Add(2 * time.Minute)
		for {
			state, got := e.genPhase(t, 2)
			if state == projection.StateLive {
				return false // it went through before it could be killed
			}
			if got == phase {
				break
			}
			require.True(t, time.Now().Before(deadline), "phase %s never came (at %s %s)", phase, state, got)
			select {
			case <-p.done:
				t.Fatalf("the rebuild exited (%v) before %s\nstderr:\n%s", p.err, phase, p.stderr.String())
			case <-time.After(2 * time.Millisecond):
			}
		}
		if phase == projection.PhaseReplay {
			// Meanwhile a second process asks for the same rebuild. The
			// replay is held meanwhile (its next transaction waits for a
			// lock on its state table), or it could end before the second
			// process starts.
			var schema string
			require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT schema FROM generations WHERE projection = 'ledger' AND generation = 2`).Scan(&schema))
			state := pgx.Identifier{schema, "_inorder_replay"}.Sanitize()
			for e.count(t, `SELECT count(*) FROM pg_class WHERE oid = to_regclass($1)`, state) == 0 {
				// The replay creates its tables after it enters its phase.
				require.True(t, time.Now().Before(deadline), "the replay's state table never came")
				time.Sleep(2 * time.Millisecond)
			}
			hold, err := e.db.Pool.Begin(t.Context())
			require.NoError(t, err)
			_, lerr := hold.Exec(t.Context(), `LOCK TABLE `+state+` IN EXCLUSIVE MODE`)
			if lerr == nil {
				_, errOut, err := e.exec(t, "rebuild", "ledger")
				require.Equal(t, 1, exitCode(t, err), errOut)
				require.Contains(t, errOut, "generation 2 (code version 1, replay) is being built by another process")
				asked = true
			}
			require.NoError(t, hold.Rollback(t.Context()))
		}
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
		p.signal(t, syscall.SIGKILL)
		require.Error(t, p.wait(t, 30*time.Second))
		state, _ := e.genPhase(t, 2)
		return state != projection.StateLive
	}
	killed := 0
	for _, phase := range []string{projection.PhaseReplay, projection.PhaseCatchUp, projection.PhaseVerify} {
		if !killIn(phase) {
			break
		}
		killed++
		state, _ := e.genPhase(t, 1)
		require.Equal(t, projection.StateLive, state, "generation 1 stays live")
	}
	require.GreaterOrEqual(t, killed, 2, "killed in the replay and the catch-up at least")
	require.True(t, asked, "a second process asked for the rebuild during the replay")
	t.Logf("killed %d times", killed)

	close(stopAppending)
	<-appended
	mu.Lock()
	e.waitApplied(t, int64(len(all)), 3*time.Minute)
	mu.Unlock()
	if state, _ := e.genPhase(t, 2); state != projection.StateLive {
		var rep cli.RebuildReport
		e.runJSON(t, &rep, append(rebuild, "--wait")...)
		require.Equal(t, 2, rep.Generation)
		require.Equal(t, 1, rep.Previous)
		require.True(t, rep.Resumed, "a killed rebuild resumes")
	}

	// Every event appended reaches both generations: the workers feed both.
	mu.Lock()
	final := append([]aggregate.Event(nil), all...)
	mu.Unlock()
	want, err := ledger.Fold(final)
	require.NoError(t, err)
	var schema string
	require.NoError(t, e.db.Pool.QueryRow(t.Context(), `SELECT schema FROM generations WHERE projection = 'ledger' AND state = 'live'`).Scan(&schema))
	deadline := time.Now().Add(2 * time.Minute)
	for e.count(t, `SELECT coalesce(sum(version), 0)::bigint FROM `+pgx.Identifier{schema, "ledger_payments"}.Sanitize()) != int64(len(final)) ||
		e.applied(t) != int64(len(final)) {
		require.True(t, time.Now().Before(deadline), "not every event applied to both generations")
		time.Sleep(20 * time.Millisecond)
	}
	close(stopReading)
	require.NoError(t, <-readErr)
	require.Positive(t, reads)
	require.Equal(t, want, e.genModel(t, schema), "the new generation equals the in-order fold")
	require.Equal(t, want, e.genModel(t, ""), "the previous generation too")

	var gens []projection.Generation
	e.runJSON(t, &gens, "rebuild", "status", "ledger")
	require.Len(t, gens, 2)
	require.Equal(t, projection.StatePrevious, gens[0].State)
	require.Equal(t, projection.StateLive, gens[1].State)
	var st projection.Status
	e.runJSON(t, &st, "status")
	require.Len(t, st.Generations, 2)
	for _, g := range st.Generations {
		// Generation 1 was never rebuilt and the workers fed generation 2
		// after its rebuild: each counts what it applied, not what a
		// rebuild read.
		require.NotNil(t, g.Applied, "generation %d", g.Generation)
		require.Equal(t, int64(len(final)), *g.Applied, "generation %d counts the events applied in it", g.Generation)
	}
	out := e.run(t, "status")
	require.Regexp(t, `(?m)^ledger\s+1\s+1\s+previous\s+-?\s*`+strconv.Itoa(len(final))+`\s+0\s`, out)

	out = e.run(t, "rebuild", "rollback", "ledger", "--dry-run")
	require.Contains(t, out, "dry run, nothing changed: rebuild-rollback: ledger generation 1")
	e.runJSON(t, &gens, "rebuild", "status", "ledger")
	require.Equal(t, projection.StateLive, gens[1].State, "the dry run changed nothing")
	out = e.run(t, "rebuild", "rollback", "ledger")
	require.Contains(t, out, "generation 1 of ledger live again")
	var dry projection.ActionReport
	e.runJSON(t, &dry, "rebuild", "drop", "ledger", "--generation", "2", "--dry-run")
	require.True(t, dry.DryRun)
	require.Positive(t, dry.Deleted["versions"]+dry.Deleted["tables"], "it says what it would drop: %+v", dry.Deleted)
	require.Positive(t, dry.Deleted["tables"])
	require.Equal(t, int64(1), e.count(t, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema), "and drops nothing")
	out = e.run(t, "rebuild", "drop", "ledger", "--generation", "2", "--yes")
	require.Contains(t, out, "generation 2 of ledger (code version 1, was previous) dropped")
	require.Zero(t, e.count(t, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, schema))
}

func leftPad(n int) string {
	s := strconv.Itoa(n)
	for len(s) < 6 {
		s = "0" + s
	}
	return s
}
