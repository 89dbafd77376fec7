package effects_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/projection"
)

// TestKey pins the key's derivation: from the fact, never the attempt; every
// input changes it.
func TestKey(t *testing.T) {
	t.Parallel()
	e, err := aggregate.New("pay-1", 3, "payment.captured", map[string]int{"amount": 5})
	require.NoError(t, err)
	base := effects.Intent{Kind: "webhook", Event: e}
	k := base.Key("ledger")
	u, err := uuid.Parse(k)
	require.NoError(t, err)
	require.Equal(t, uuid.Version(8), u.Version(), "a name-based UUID")
	require.Equal(t, u.String(), k, "in canonical form")
	require.Equal(t, k, base.Key("ledger"), "same fact, same key")
	again := base
	again.Args = map[string]string{"other": "args"}
	require.Equal(t, k, again.Key("ledger"), "args are not part of the key")
	e2 := e
	e2.ID = "pay-1:3"
	require.Equal(t, k, effects.Intent{Kind: "webhook", Event: e2}.Key("ledger"), "the default id is the stable id")
	// The derivation itself: keys recorded by earlier releases stay the
	// keys of their facts.
	var data []byte
	for _, f := range []string{"ledger", "pay-1:3", "webhook", "", ""} {
		data = binary.AppendUvarint(data, uint64(len(f)))
		data = append(data, f...)
	}
	require.Equal(t, uuid.NewHash(sha256.New(), uuid.MustParse("6f1d3c2a-9b8e-4f57-a0c4-2e5d7b9a1c30"), data, 8).String(), k)

	variants := map[string]string{}
	add := func(name, key string) {
		for other, v := range variants {
			require.NotEqual(t, v, key, "%s and %s have the same key", name, other)
		}
		variants[name] = key
	}
	add("base", k)
	add("projection", base.Key("ledger2"))
	withKind := base
	withKind.Kind = "webhook2"
	add("kind", withKind.Key("ledger"))
	withDisc := base
	withDisc.Discriminator = "to:alice"
	add("discriminator", withDisc.Key("ledger"))
	withSalt := base
	withSalt.Salt = "resend-1"
	add("salt", withSalt.Key("ledger"))
	e3 := e
	e3.ID = "esdb-uuid-1"
	add("event id", effects.Intent{Kind: "webhook", Event: e3}.Key("ledger"))
	// Fields are length-prefixed: moving a boundary changes the key.
	a := effects.Intent{Kind: "ab", Event: e, Discriminator: "c"}
	b := effects.Intent{Kind: "a", Event: e, Discriminator: "bc"}
	require.NotEqual(t, a.Key("p"), b.Key("p"))
}

// TestRecordAndPerform is the life of one intent: recorded with the
// projection's writes, performed once after the commit with its key, done.
func TestRecordAndPerform(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	es := events(t, "a", 3)
	b.process(t, es...)
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM effects WHERE state = 'pending'`))
	for _, e := range es {
		require.Equal(t, 1, b.jobsOf(t, keyOf(kindNotify, e)))
	}
	b.start(t)
	b.waitAllDone(t)
	for _, e := range es {
		k := keyOf(kindNotify, e)
		require.Len(t, b.idem.callsOf(k), 1, "one call per key")
		got, err := b.fx.Get(t.Context(), k)
		require.NoError(t, err)
		require.Equal(t, effects.Done, got.State)
		require.Equal(t, 1, got.Attempts)
		require.False(t, got.Uncertain)
		require.Equal(t, "notifier", got.Projection)
		require.Equal(t, e.StableID(), got.EventID)
		require.Equal(t, e.Version, got.Version)
		require.JSONEq(t, fmt.Sprintf(`{"aggregate":"a","version":%d}`, e.Version), string(got.Args))
		require.False(t, got.DoneAt.IsZero())
	}
}

// TestRecordRollsBack: intents and their jobs are in the batch's
// transaction — a handler that fails after recording leaves neither, and the
// event is quarantined without an effect.
func TestRecordRollsBack(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.notifier.fail = func([]aggregate.Event) error { return errors.New("read model write failed") }
	res := b.process(t, events(t, "a", 1)...)
	require.Equal(t, projection.Quarantined, res[0].Outcome)
	require.Zero(t, b.count(t, `SELECT count(*) FROM effects`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM river_job`))
}

// TestRecordAfterAFailingStatement: Record's insert shares the pipeline
// with the handler's statements. A statement of the handler's that fails
// ahead of it — with a unique violation, the error a recorded key also
// raises — fails the handler: its first event is quarantined (the others
// park behind it) without intents, and nothing is taken for a key recorded
// already. Once the statement no longer fails, retrying records every
// intent once.
func TestRecordAfterAFailingStatement(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, effects.DirectJobs + 4} { // a job per intent; one relay job
		t.Run(fmt.Sprintf("intents=%d", n), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			ctx := t.Context()
			b.notifier.ahead = func(tx *projection.Tx) {
				tx.Queue(`INSERT INTO fx_model (aggregate, version) VALUES ('dup', 1), ('dup', 2)`)
			}
			res := b.process(t, events(t, "a", n)...)
			require.Equal(t, projection.Quarantined, res[0].Outcome)
			for _, r := range res[1:] {
				require.Equal(t, projection.Parked, r.Outcome) // behind the quarantined version
			}
			q, err := b.proc.Quarantined(ctx, projection.ListOptions{})
			require.NoError(t, err)
			require.Len(t, q, 1)
			require.Contains(t, q[0].Error, "23505")
			require.Zero(t, b.count(t, `SELECT count(*) FROM effects`))
			require.Zero(t, b.count(t, `SELECT count(*) FROM river_job`))

			b.notifier.ahead = nil
			require.NoError(t, acted(b.proc.RetryQuarantined(ctx, "notifier", "a", nil)))
			require.Equal(t, n, b.count(t, `SELECT count(*) FROM effects`))
			require.Equal(t, n, b.count(t, `SELECT count(DISTINCT key) FROM effects`))
		})
	}
}

// TestRecordRefusesUnknownKind: an intent nothing would perform is an error
// in the handler, not a row that waits forever.
func TestRecordRefusesUnknownKind(t *testing.T) {
	t.Parallel()
	b := setup(t, &setupOpts{kind: "no.such.kind"})
	_, err := b.proc.Process(t.Context(), projection.Batch{Events: events(t, "a", 1)})
	require.NoError(t, err) // quarantined
	q, err := b.proc.Quarantined(t.Context(), projection.ListOptions{})
	require.NoError(t, err)
	require.Len(t, q, 1)
	require.Contains(t, q[0].Error, effects.ErrUnknownKind.Error())
	require.Zero(t, b.count(t, `SELECT count(*) FROM effects`))
}

// TestSameEventConcurrently is the seed's test for effects: one event
// delivered at once by 2, 8 and 64 goroutines — through the gate, and
// recorded directly by as many transactions, bypassing the gate — records
// exactly one intent and one job, and the remote side gets exactly one call
// with its key.
func TestSameEventConcurrently(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 8, 64} {
		t.Run(fmt.Sprintf("goroutines=%d", n), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			es := events(t, "agg", 3)
			for v, e := range es {
				outcomes := make([]projection.Outcome, n)
				atOnce(t, n, func(i int) error {
					res, err := b.proc.Process(context.Background(), projection.Batch{Events: []aggregate.Event{e}})
					if err == nil {
						outcomes[i] = res[0].Outcome
					}
					return err
				})
				applied := 0
				for _, o := range outcomes {
					if o == projection.Applied {
						applied++
					} else {
						require.Equal(t, projection.Duplicate, o)
					}
				}
				require.Equal(t, 1, applied, "version %d", v+1)
				k := keyOf(kindNotify, e)
				require.Equal(t, 1, b.count(t, `SELECT count(*) FROM effects WHERE key = $1`, k))
				require.Equal(t, 1, b.jobsOf(t, k))
			}

			// The constraint, not the gate, decides: n transactions record
			// the same intent directly.
			direct := events(t, "direct", 1)[0]
			recorded := make([]int, n)
			atOnce(t, n, func(i int) error {
				return pgx.BeginFunc(context.Background(), b.db.Pool, func(tx pgx.Tx) error {
					var err error
					recorded[i], err = b.fx.RecordTx(context.Background(), tx, "notifier",
						effects.Intent{Kind: kindNotify, Event: direct, Args: "direct"})
					return err
				})
			})
			sum := 0
			for _, r := range recorded {
				sum += r
			}
			require.Equal(t, 1, sum, "exactly one transaction recorded it")
			dk := keyOf(kindNotify, direct)
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM effects WHERE key = $1`, dk))
			require.Equal(t, 1, b.jobsOf(t, dk))

			// The same for a set larger than DirectJobs (a plain insert,
			// falling back to ON CONFLICT once another transaction has the
			// keys): one transaction records them all.
			var set []effects.Intent
			for _, e := range events(t, "set", effects.DirectJobs+3) {
				set = append(set, effects.Intent{Kind: kindNotify, Event: e})
			}
			recorded = make([]int, n)
			atOnce(t, n, func(i int) error {
				return pgx.BeginFunc(context.Background(), b.db.Pool, func(tx pgx.Tx) error {
					var err error
					recorded[i], err = b.fx.RecordTx(context.Background(), tx, "notifier", set...)
					return err
				})
			})
			require.ElementsMatch(t, append(make([]int, n-1), len(set)), recorded, "one transaction recorded the set, the others nothing")
			require.Equal(t, len(set), b.count(t, `SELECT count(*) FROM effects WHERE aggregate = 'set'`))
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM river_job WHERE kind = $1`, effects.RelayJobKind))

			// A batch larger than DirectJobs, delivered at once: its intents
			// and their one relay job are recorded by one transaction.
			big := events(t, "big", effects.DirectJobs+4)
			atOnce(t, n, func(int) error {
				_, err := b.proc.Process(context.Background(), projection.Batch{Events: big})
				return err
			})
			require.Equal(t, len(big), b.count(t, `SELECT count(*) FROM effects WHERE aggregate = 'big'`))
			require.Equal(t, 2, b.count(t, `SELECT count(*) FROM river_job WHERE kind = $1`, effects.RelayJobKind))

			b.start(t)
			b.waitAllDone(t)
			calls := b.idem.callsByKey()
			all := slices.Concat(es, []aggregate.Event{direct}, big, events(t, "set", effects.DirectJobs+3))
			require.Len(t, calls, len(all))
			for _, e := range all {
				require.Equal(t, 1, calls[keyOf(kindNotify, e)], "one remote call for %s v%d", e.Aggregate, e.Version)
			}
		})
	}
}

// TestRelay: a set of intents larger than DirectJobs gets one relay job in
// the recording transaction; once committed, the relay enqueues one job per
// intent, and each is performed once. Intents already recorded are not
// relayed again.
func TestRelay(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var intents []effects.Intent
	for i := range effects.DirectJobs * 3 {
		intents = append(intents, intent(t, kindNotify, fmt.Sprintf("r%02d", i)))
	}
	keys := b.record(t, intents...)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM river_job WHERE kind = $1`, effects.RelayJobKind))
	require.Zero(t, b.count(t, `SELECT count(*) FROM river_job WHERE kind = $1`, effects.JobKind), "the relay enqueues them after the commit")
	// Recorded again, with a few new ones: only the new ones are relayed.
	more := append(intents[:effects.DirectJobs+1:effects.DirectJobs+1], intent(t, kindNotify, "new-1"), intent(t, kindNotify, "new-2"))
	var recorded int
	require.NoError(t, pgx.BeginFunc(t.Context(), b.db.Pool, func(tx pgx.Tx) error {
		var err error
		recorded, err = b.fx.RecordTx(t.Context(), tx, "notifier", more...)
		return err
	}))
	require.Equal(t, 2, recorded)
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM river_job WHERE kind = $1`, effects.RelayJobKind))

	b.start(t)
	b.waitAllDone(t)
	keys = append(keys, more[len(more)-2].Key("notifier"), more[len(more)-1].Key("notifier"))
	calls := b.idem.callsByKey()
	require.Len(t, calls, len(keys))
	for _, k := range keys {
		require.Equal(t, 1, calls[k])
		require.Equal(t, 1, b.jobsOf(t, k), "one job per intent, from its batch's relay")
	}
}

// atOnce runs fn(0…n-1) on n goroutines released together and requires
// that none failed.
func atOnce(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
}

// TestRun: Run works intents until its context ends, then stops cleanly.
func TestRun(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	k := b.record(t, intent(t, kindNotify, "run"))[0]
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.fx.Run(ctx, 10*time.Second) }()
	b.waitState(t, k, effects.Done)
	cancel()
	require.NoError(t, <-done)
	require.Len(t, b.idem.callsOf(k), 1)
	require.NoError(t, b.fx.Start(t.Context()), "a stopped client starts again")
}

// acted returns the error of an operator action, for the tests that check
// only that.
func acted(_ projection.ActionReport, err error) error { return err }
