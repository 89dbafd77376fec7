package effects

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"

	"github.com/inorder/inorder/projection"
)

// Record records intents in the handler's transaction tx, keyed by
// tx.Projection() (see Intent.Key), and enqueues their River jobs in the same
// transaction: both commit with the projection's writes and the event's
// version, or neither does. Up to DirectJobs intents get one job each; a
// larger set gets one relay job, which enqueues the job of each intent after
// the commit — so a batch's transaction writes one River row, not one per
// intent.
//
// An intent whose key is already recorded — the event was replayed by a
// rebuild, retried after a quarantine, delivered twice at once — is left
// alone: the effects table's primary key decides, not a check before the
// insert, so concurrent transactions record a key exactly once. Record
// returns how many intents it recorded.
//
// Record queues its insert behind what tx has queued and sends them
// together, then enqueues the River jobs: two round trips, one of which
// the handler's statements would have taken anyway. A BatchHandler records
// the intents of its whole batch with one call; a per-event handler calls
// it per event.
func (c *Client) Record(ctx context.Context, tx *projection.Tx, intents ...Intent) (int, error) {
	if len(intents) == 0 {
		return 0, nil
	}
	name := tx.Projection()
	if name == "" {
		return 0, errors.New("effects: Record needs the transaction of a projection's handler (Tx.Projection is empty); use RecordTx")
	}
	rec, err := c.newRecording(name, intents)
	if err != nil {
		return 0, err
	}
	rec.queue(tx.Queue)
	sent := tx.Flush(ctx)
	ptx, err := tx.Tx(ctx) // nothing is queued now: the transaction
	if err != nil {
		return 0, fmt.Errorf("effects: record: %w", err)
	}
	if err := rec.finish(ctx, ptx, sent); err != nil {
		return 0, fmt.Errorf("effects: record: %w", err)
	}
	return rec.inserted, nil
}

// RecordTx is Record for code that holds a plain pgx transaction: it
// records intents on behalf of the projection named projection.
func (c *Client) RecordTx(ctx context.Context, tx pgx.Tx, projection string, intents ...Intent) (int, error) {
	if len(intents) == 0 {
		return 0, nil
	}
	if projection == "" {
		return 0, errors.New("effects: record: empty projection name")
	}
	rec, err := c.newRecording(projection, intents)
	if err != nil {
		return 0, err
	}
	b := &pgx.Batch{}
	rec.queue(b.Queue)
	err = tx.SendBatch(ctx, b).Close()
	if err := rec.finish(ctx, tx, err); err != nil {
		return 0, fmt.Errorf("effects: record: %w", err)
	}
	return rec.inserted, nil
}

// recording is one Record call's intents, as the parameters of its insert,
// and what the insert returned.
type recording struct {
	c *Client
	// params are the insert's: the projection, then one array per column,
	// sorted by key (concurrent transactions lock the keys in one order)
	// without repeated keys.
	params []any
	keys   [][16]byte
	kinds  []string

	// What the insert returned: the keys and kinds it inserted (up to
	// DirectJobs intents), or its batch and count (more).
	newKeys, newKinds []string
	relay             relayArgs
	inserted          int
	// savepoint: the large insert's savepoint was taken; conflict: its
	// plain insert met a recorded key.
	savepoint, conflict bool
}

// newRecording checks intents and derives their keys and parameters.
func (c *Client) newRecording(projection string, intents []Intent) (*recording, error) {
	type row struct {
		key  [16]byte
		in   *Intent
		id   string // the event's stable id
		args []byte
		i    int // the intent's index
	}
	rows := make([]row, 0, len(intents))
	var keyBuf []byte
	for i := range intents {
		in := &intents[i]
		if in.Kind == "" {
			return nil, errors.New("effects: record: an intent has an empty kind")
		}
		if _, ok := c.handlers[in.Kind]; !ok {
			return nil, fmt.Errorf("effects: record %q: %w", in.Kind, ErrUnknownKind)
		}
		if in.Event.Aggregate == "" || in.Event.Version < 1 {
			return nil, fmt.Errorf("effects: record %q: the intent's event has no aggregate or version", in.Kind)
		}
		args, err := json.Marshal(in.Args)
		if err != nil {
			return nil, fmt.Errorf("effects: record %q: args: %w", in.Kind, err)
		}
		var k [16]byte
		id := in.Event.StableID()
		k, keyBuf = keyOf(keyBuf, projection, id, in.Kind, in.Discriminator, in.Salt)
		rows = append(rows, row{key: k, in: in, id: id, args: args, i: i})
	}
	// Sorted keys (bytewise, the order of their text form too): concurrent
	// transactions lock them in one order. The first of equal keys stays.
	slices.SortFunc(rows, func(a, b row) int {
		if c := bytes.Compare(a.key[:], b.key[:]); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	rows = slices.CompactFunc(rows, func(a, b row) bool { return a.key == b.key })

	n := len(rows)
	keys, kinds, ids, aggs, discs, salts := make([][16]byte, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	vers := make([]int64, n)
	args := make(pgtype.FlatArray[[]byte], n) // a FlatArray: pgx encodes it without reflection
	for i, r := range rows {
		keys[i], kinds[i], ids[i], aggs[i], vers[i] = r.key, r.in.Kind, r.id, r.in.Event.Aggregate, r.in.Event.Version
		discs[i], salts[i], args[i] = r.in.Discriminator, r.in.Salt, r.args
	}
	return &recording{c: c, params: []any{projection, keys, kinds, ids, aggs, vers, discs, salts, args}, keys: keys, kinds: kinds}, nil
}

// queue queues the insert of the recording's intents with q (a pipeline's
// Queue): up to DirectJobs, an insert that returns the keys it inserted; more, under
// a savepoint, a plain insert of the batch (see insertBatch).
func (r *recording) queue(q func(string, ...any) *pgx.QueuedQuery) {
	c := r.c
	if len(r.keys) <= DirectJobs {
		q(c.sql.insert, r.params...).Query(func(rows pgx.Rows) error {
			var k, kind string
			_, err := pgx.ForEachRow(rows, []any{&k, &kind}, func() error {
				r.newKeys, r.newKinds = append(r.newKeys, k), append(r.newKinds, kind)
				return nil
			})
			return err
		})
		return
	}
	q(`SAVEPOINT inorder_effects`).Exec(func(pgconn.CommandTag) error {
		r.savepoint = true
		return nil
	})
	q(c.sql.insertBatchNew, r.params...).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&r.relay.Batch, &r.inserted, &r.relay.At)
		var pgErr *pgconn.PgError
		r.conflict = errors.As(err, &pgErr) && pgErr.Code == uniqueViolation
		return err
	})
	q(`RELEASE SAVEPOINT inorder_effects`)
}

// finish completes the recording in tx once the queued statements were sent
// (with error sent): on a conflict of the large insert, it inserts again
// with ON CONFLICT DO NOTHING; then it enqueues the River jobs of what was
// inserted.
func (r *recording) finish(ctx context.Context, tx pgx.Tx, sent error) error {
	c := r.c
	if len(r.keys) <= DirectJobs {
		if sent != nil {
			return sent
		}
		r.inserted = len(r.newKeys)
		return c.enqueue(ctx, tx, c.jobsFor(r.newKeys, r.newKinds, priorityNew))
	}
	if sent != nil {
		if !r.savepoint || !r.conflict {
			return sent
		}
		// A key is recorded already (a replay, a rebuild): roll back to
		// the savepoint and insert what is new. Alone: a batch prepares its
		// statements first, which the aborted transaction refuses.
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT inorder_effects`); err != nil {
			return err
		}
		b := &pgx.Batch{}
		b.Queue(`RELEASE SAVEPOINT inorder_effects`)
		b.Queue(c.sql.insertBatch, r.params...).QueryRow(func(row pgx.Row) error {
			return row.Scan(&r.relay.Batch, &r.inserted, &r.relay.At)
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
	}
	if r.inserted == 0 {
		return nil
	}
	r.relay.Kinds = slices.Compact(slices.Sorted(slices.Values(r.kinds)))
	if _, err := c.river.InsertTx(ctx, tx, r.relay, &river.InsertOpts{Queue: c.cfg.Queue, MaxAttempts: c.cfg.MaxAttempts, Priority: priorityFirst}); err != nil {
		return fmt.Errorf("enqueue relay job: %w", err)
	}
	return nil
}

// uniqueViolation is PostgreSQL's SQLSTATE of a unique constraint violation.
const uniqueViolation = "23505"

// DirectJobs is how many intents Record enqueues one River job each for;
// more get one relay job (see Record).
const DirectJobs = 8

// relayArgs are the args of a relay job: Batch finds its intents (see
// statements.relay); At (the recording transaction's start) and Kinds are
// what relay workers of releases before migration 006 also match on, and
// tell people reading River's tables what the batch holds.
type relayArgs struct {
	Batch int64     `json:"batch"`
	At    time.Time `json:"at"`
	Kinds []string  `json:"kinds"`
}

// Kind implements river.JobArgs.
func (relayArgs) Kind() string { return RelayJobKind }

// relayWorker enqueues, in one transaction, the job of every intent of a
// batch that no attempt took yet. Run again (River rescued it, or it
// failed), it enqueues only those without a job; a second job would be
// harmless anyway: it finds the intent taken or settled.
type relayWorker struct {
	river.WorkerDefaults[relayArgs]
	c *Client
}

// Work enqueues the batch's jobs.
func (w *relayWorker) Work(ctx context.Context, job *river.Job[relayArgs]) error {
	c := w.c
	relay := c.sql.relay
	if job.Attempt > 1 {
		// It ran before (River rescued it from a dead client, or it
		// failed): skip the intents it enqueued then.
		relay = c.sql.relayAgain
	}
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, relay, job.Args.Batch)
		if err != nil {
			return fmt.Errorf("effects: relay batch %d: %w", job.Args.Batch, err)
		}
		var keys, kinds []string
		var k, kind string
		if _, err := pgx.ForEachRow(rows, []any{&k, &kind}, func() error {
			keys, kinds = append(keys, k), append(kinds, kind)
			return nil
		}); err != nil {
			return fmt.Errorf("effects: relay batch %d: %w", job.Args.Batch, err)
		}
		return c.enqueue(ctx, tx, c.jobsFor(keys, kinds, priorityNew))
	})
}

// enqueue inserts River jobs in tx.
func (c *Client) enqueue(ctx context.Context, tx pgx.Tx, jobs []river.InsertManyParams) error {
	if len(jobs) == 0 {
		return nil
	}
	if _, err := c.river.InsertManyFastTx(ctx, tx, jobs); err != nil {
		return fmt.Errorf("enqueue River jobs: %w", err)
	}
	return nil
}

// jobArgs are the args of an effect's River job: the intent's key, which
// is all the worker needs, and its effect kind, for people reading River's
// tables or UI.
type jobArgs struct {
	Key    string `json:"key"`
	Effect string `json:"effect"`
}

// Kind implements river.JobArgs.
func (jobArgs) Kind() string { return JobKind }

// River priorities of the jobs (River works priority 1 first, then 2, …;
// within one, oldest first): an intent's first job waits behind the jobs of
// intents taken up after their executor died, of operators' retries and of
// relays, so that those are not queued behind a backlog.
const (
	priorityFirst = 1 // relay jobs, recoveries, operators' retries
	priorityNew   = 2 // the first job of an intent
)

// jobsFor returns the job parameters of keys, at River priority priority.
func (c *Client) jobsFor(keys, kinds []string, priority int) []river.InsertManyParams {
	opts := &river.InsertOpts{Queue: c.cfg.Queue, MaxAttempts: c.cfg.MaxAttempts, Priority: priority}
	jobs := make([]river.InsertManyParams, len(keys))
	for i := range keys {
		jobs[i] = river.InsertManyParams{Args: jobArgs{Key: keys[i], Effect: kinds[i]}, InsertOpts: opts}
	}
	return jobs
}
