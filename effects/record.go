package effects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
// Record sends what tx has queued first, and takes two round trips (the
// insert, then River's). A BatchHandler records the intents of its whole
// batch with one call; a per-event handler calls it per event.
func (c *Client) Record(ctx context.Context, tx *projection.Tx, intents ...Intent) (int, error) {
	if len(intents) == 0 {
		return 0, nil
	}
	name := tx.Projection()
	if name == "" {
		return 0, errors.New("effects: Record needs the transaction of a projection's handler (Tx.Projection is empty); use RecordTx")
	}
	ptx, err := tx.Tx(ctx)
	if err != nil {
		return 0, fmt.Errorf("effects: record: %w", err)
	}
	return c.RecordTx(ctx, ptx, name, intents...)
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
	type row struct {
		key  string
		in   *Intent
		args []byte
	}
	rows := make([]row, 0, len(intents))
	for i := range intents {
		in := &intents[i]
		if in.Kind == "" {
			return 0, errors.New("effects: record: an intent has an empty kind")
		}
		if _, ok := c.handlers[in.Kind]; !ok {
			return 0, fmt.Errorf("effects: record %q: %w", in.Kind, ErrUnknownKind)
		}
		if in.Event.Aggregate == "" || in.Event.Version < 1 {
			return 0, fmt.Errorf("effects: record %q: the intent's event has no aggregate or version", in.Kind)
		}
		args, err := json.Marshal(in.Args)
		if err != nil {
			return 0, fmt.Errorf("effects: record %q: args: %w", in.Kind, err)
		}
		rows = append(rows, row{key: in.Key(projection), in: in, args: args})
	}
	// Sorted keys: concurrent transactions lock them in one order. The
	// first of equal keys stays.
	slices.SortStableFunc(rows, func(a, b row) int { return strings.Compare(a.key, b.key) })
	rows = slices.CompactFunc(rows, func(a, b row) bool { return a.key == b.key })

	n := len(rows)
	keys, kinds, ids, aggs, discs, salts := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	vers := make([]int64, n)
	args := make([]string, n)
	for i, r := range rows {
		keys[i], kinds[i], ids[i], aggs[i], vers[i] = r.key, r.in.Kind, r.in.Event.StableID(), r.in.Event.Aggregate, r.in.Event.Version
		discs[i], salts[i], args[i] = r.in.Discriminator, r.in.Salt, string(r.args)
	}
	if n > DirectJobs {
		relay, inserted, err := c.insertBatch(ctx, tx, projection, keys, kinds, ids, aggs, vers, discs, salts, args)
		if err != nil {
			return 0, fmt.Errorf("effects: record: %w", err)
		}
		if inserted > 0 {
			relay.Kinds = slices.Compact(slices.Sorted(slices.Values(kinds)))
			if _, err := c.river.InsertTx(ctx, tx, relay, &river.InsertOpts{Queue: c.cfg.Queue, MaxAttempts: c.cfg.MaxAttempts}); err != nil {
				return 0, fmt.Errorf("effects: record: enqueue relay job: %w", err)
			}
		}
		return int(inserted), nil
	}
	res, err := tx.Query(ctx, c.sql.insert, projection, keys, kinds, ids, aggs, vers, discs, salts, args)
	if err != nil {
		return 0, fmt.Errorf("effects: record: %w", err)
	}
	var newKeys, newKinds []string
	var k, kind string
	if _, err := pgx.ForEachRow(res, []any{&k, &kind}, func() error {
		newKeys, newKinds = append(newKeys, k), append(newKinds, kind)
		return nil
	}); err != nil {
		return 0, fmt.Errorf("effects: record: %w", err)
	}
	if err := c.enqueue(ctx, tx, c.jobsFor(newKeys, newKinds)); err != nil {
		return 0, fmt.Errorf("effects: record: %w", err)
	}
	return len(newKeys), nil
}

// insertBatch inserts a large batch's intents and returns its batch number
// and how many it inserted. It tries a plain insert first, under a
// savepoint; if one of the keys is recorded already (a replay, a rebuild),
// it rolls back to the savepoint and inserts with ON CONFLICT DO NOTHING.
// Either way the primary key decides.
func (c *Client) insertBatch(ctx context.Context, tx pgx.Tx, projection string, arrays ...any) (relay relayArgs, inserted int64, err error) {
	params := append([]any{projection}, arrays...)
	scan := func(row pgx.Row) error { return row.Scan(&relay.Batch, &inserted, &relay.At) }
	b := &pgx.Batch{}
	b.Queue(`SAVEPOINT inorder_effects`)
	b.Queue(c.sql.insertBatchNew, params...).QueryRow(scan)
	b.Queue(`RELEASE SAVEPOINT inorder_effects`)
	err = tx.SendBatch(ctx, b).Close()
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) || pgErr.Code != uniqueViolation || pgErr.TableName != "effects" {
		return relay, inserted, err
	}
	// Alone: a batch prepares its statements first, which the aborted
	// transaction refuses.
	if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT inorder_effects`); err != nil {
		return relay, 0, err
	}
	b = &pgx.Batch{}
	b.Queue(`RELEASE SAVEPOINT inorder_effects`)
	b.Queue(c.sql.insertBatch, params...).QueryRow(scan)
	return relay, inserted, tx.SendBatch(ctx, b).Close()
}

// uniqueViolation is PostgreSQL's SQLSTATE of a unique constraint violation.
const uniqueViolation = "23505"

// DirectJobs is how many intents Record enqueues one River job each for;
// more get one relay job (see Record).
const DirectJobs = 8

// RelayJobKind is the River job kind of relay jobs: their args carry the
// batch number of the intents they enqueue.
const RelayJobKind = "inorder.effect.relay"

// relayArgs are the args of a relay job: what finds its intents (see
// statements.relay).
type relayArgs struct {
	Batch int64     `json:"batch"`
	At    time.Time `json:"at"`
	Kinds []string  `json:"kinds"`
}

// Kind implements river.JobArgs.
func (relayArgs) Kind() string { return RelayJobKind }

// relayWorker enqueues, in one transaction, the job of every intent of a
// batch that no attempt took yet. Run twice, it enqueues them twice: that
// is harmless, the second job of an intent finds it taken or settled.
type relayWorker struct {
	river.WorkerDefaults[relayArgs]
	c *Client
}

// Work enqueues the batch's jobs.
func (w *relayWorker) Work(ctx context.Context, job *river.Job[relayArgs]) error {
	c := w.c
	return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, c.sql.relay, job.Args.Kinds, job.Args.At, job.Args.Batch)
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
		return c.enqueue(ctx, tx, c.jobsFor(keys, kinds))
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

// jobsFor returns the job parameters of keys.
func (c *Client) jobsFor(keys, kinds []string) []river.InsertManyParams {
	opts := &river.InsertOpts{Queue: c.cfg.Queue, MaxAttempts: c.cfg.MaxAttempts}
	jobs := make([]river.InsertManyParams, len(keys))
	for i := range keys {
		jobs[i] = river.InsertManyParams{Args: jobArgs{Key: keys[i], Effect: kinds[i]}, InsertOpts: opts}
	}
	return jobs
}
