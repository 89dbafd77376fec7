package generation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
)

// This file holds the replay of a side-by-side rebuild (Build, phase 1);
// finalize.go holds its finalization (phase 2).
//
// A replay is ordered and has one writer, so it does without the gate's
// version rows: it keeps each aggregate's last version in memory and
// appends every applied version's id and hash to a journal, an unlogged
// table without index in the generation's schema, written in the same
// pipeline as the handler's statements — together with the replay's
// position, in a one-row unlogged table beside it. Finalization turns the
// journal into version rows and applied log, once per aggregate.
//
// The journal, the replay's position and (with Options.Unlogged) the
// projection's tables are all unlogged: a database crash empties them all
// at once, and the replay then starts again (a missing position row means
// a fresh start: everything the generation has is cleared first).
//
// An event that does not continue its aggregate in memory — a duplicate,
// a gap, an older version — and the events of an aggregate whose handler
// failed take the gate instead: the aggregate's version row is written
// (with its journal entries moved to the applied log), and from then on the
// aggregate is "gated": all its events go through the generation's gate
// (b.gate), which parks, discards, records conflicts and quarantines as
// for live batches. Such a batch commits the gate's transaction first,
// then the replay's with its position, so a crash in between replays the
// gated events again — duplicates, for the gate.
//
// The replay's own events reach the projection's handler through the
// gate's seam too (Target.Apply), in the replay's transaction.
//
// Inline projections keep an aggregate's version and its last versions'
// log in their own row, which the handler writes: their replay has no
// journal, and finalization writes an empty version row per row, from the
// projection's table. Versions older than a row's log count as duplicates,
// as they do live (package projection's inline gate).

// Tables of the replay, in the generation's schema. The leading underscore
// keeps them apart from the projection's tables (and out of the content
// comparison).
const (
	replayStateTable = "_inorder_replay"
	replayLogTable   = "_inorder_journal"
)

// memAgg is what the replay knows of an aggregate.
type memAgg struct {
	version int64
	gated   bool // its events go through the gate
}

// replay is the state of one run of the replay.
type replay struct {
	b       *builder
	state   string // qualified table names
	journal string
	// inline is the projection's inline table (nil if not inline): its
	// rows hold the versions, and there is no journal.
	inline *InlineTable
	known  map[string]memAgg
	// spilled is set once aggregates may be missing from known: looked up
	// in the journal and the version rows (indexed is set once the
	// journal's index exists).
	spilled, indexed bool
	position         []byte
	positionTime     time.Time
	events           int64 // the replay row's count
	lastMirror       time.Time
}

func (b *builder) replay(ctx context.Context) error {
	schema := b.gen.Schema
	q := func(t string) string { return pgx.Identifier{schema, t}.Sanitize() }
	rp := &replay{b: b, state: q(replayStateTable), journal: q(replayLogTable), inline: b.proj.Gate.Inline(schema),
		known: map[string]memAgg{}}
	if err := rp.prepare(ctx); err != nil {
		return err
	}
	if err := b.setPhase(ctx, PhaseReplay, b.opts.Fraction); err != nil {
		return err
	}
	for {
		n, err := rp.pass(ctx)
		if err != nil {
			return err
		}
		if n <= b.opts.CatchUpEvents {
			return nil
		}
	}
}

// prepare creates the generation's schema, tables and replay tables, or
// finds them and resumes.
func (rp *replay) prepare(ctx context.Context) error {
	b, env := rp.b, rp.b.env
	schema := pgx.Identifier{b.gen.Schema}.Sanitize()
	err := pgx.BeginFunc(ctx, b.conn, func(tx pgx.Tx) error {
		for _, s := range []string{
			`CREATE SCHEMA IF NOT EXISTS ` + schema,
			`CREATE UNLOGGED TABLE IF NOT EXISTS ` + rp.state + ` (
  id boolean PRIMARY KEY DEFAULT true CHECK (id), position bytea, position_time timestamptz, events bigint NOT NULL DEFAULT 0)`,
			`CREATE UNLOGGED TABLE IF NOT EXISTS ` + rp.journal + ` (
  aggregate text NOT NULL, version bigint NOT NULL, event_id text, hash bytea NOT NULL)`,
		} {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		var pos []byte
		var at *time.Time
		err := tx.QueryRow(ctx, `SELECT position, position_time, events FROM `+rp.state).Scan(&pos, &at, &rp.events)
		switch {
		case err == nil:
			// Resume: the aggregates' versions are in the journal and the
			// version rows.
			rp.position, rp.spilled = pos, true
			if at != nil {
				rp.positionTime = *at
			}
			return rp.ensureIndex(ctx, tx)
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		// A fresh start (or a database crash emptied the unlogged
		// tables): clear whatever the generation has.
		bb := &pgx.Batch{}
		env.Store.Gate.QueueClear(bb, b.gen.Key, nil)
		env.Buffer.QueueClear(bb, b.gen.Key)
		if err := tx.SendBatch(ctx, bb).Close(); err != nil {
			return err
		}
		tables, err := userTables(ctx, tx, b.gen.Schema, "")
		if err != nil {
			return err
		}
		for _, t := range tables {
			if _, err := tx.Exec(ctx, `TRUNCATE `+pgx.Identifier{b.gen.Schema, t}.Sanitize()); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `TRUNCATE `+rp.journal); err != nil {
			return err
		}
		if err := rp.setup(ctx, tx); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+rp.state+` DEFAULT VALUES`)
		return err
	})
	if err != nil {
		return fmt.Errorf("prepare the replay: %w", err)
	}
	b.gen.Position, b.gen.PositionTime = rp.position, rp.positionTime
	return nil
}

// setup creates the projection's tables in the generation's schema and,
// with Options.Unlogged, makes them unlogged for the replay.
func (rp *replay) setup(ctx context.Context, tx pgx.Tx) error {
	b := rp.b
	if s := b.proj.Gate.Tables(); s != nil {
		if err := InSchema(ctx, tx, b.gen.Schema, func() error { return s.Setup(ctx, tx) }); err != nil {
			return fmt.Errorf("set up the projection's tables: %w", err)
		}
	}
	tables, err := userTables(ctx, tx, b.gen.Schema, "")
	if err != nil {
		return err
	}
	if len(tables) == 0 {
		return fmt.Errorf("projection %s: no table in schema %s after Setup: %w", b.proj.Name, b.gen.Schema, b.env.Errors.NoSchema)
	}
	if !b.opts.Unlogged {
		return nil
	}
	// Unlogged, all or none: a table may not reference another of a
	// different kind, so a projection with foreign keys may refuse.
	sp, err := tx.Begin(ctx)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := sp.Exec(ctx, `ALTER TABLE `+pgx.Identifier{b.gen.Schema, t}.Sanitize()+` SET UNLOGGED`); err != nil {
			b.env.Log.InfoContext(ctx, "rebuild: the projection's tables stay logged during the replay", "projection", b.proj.Name, "reason", err)
			return sp.Rollback(ctx)
		}
	}
	return sp.Commit(ctx)
}

// userTables lists the tables of schema, but the replay's own, and only
// those whose persistence is persistence ('p' logged, 'u' unlogged) when
// it is set.
func userTables(ctx context.Context, tx pgx.Tx, schema, persistence string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND left(c.relname, 9) <> '_inorder_'
  AND ($2 = '' OR c.relpersistence = $2)
ORDER BY c.relname`, schema, persistence)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ensureIndex indexes the journal by aggregate, for lookups.
func (rp *replay) ensureIndex(ctx context.Context, tx pgx.Tx) error {
	if rp.indexed {
		return nil
	}
	if _, err := tx.Exec(ctx, `CREATE INDEX IF NOT EXISTS _inorder_journal_aggregate ON `+rp.journal+` (aggregate)`); err != nil {
		return fmt.Errorf("index the journal: %w", err)
	}
	rp.indexed = true
	return nil
}

// pass reads the stream from the replay's position to its end once and
// returns the records it read.
func (rp *replay) pass(ctx context.Context) (int64, error) {
	b := rp.b
	var read int64
	var pending []aggregate.Event
	var rejects []Reject
	var pendingRead int64
	var last StreamBatch
	flush := func(ctx context.Context) error {
		if pendingRead == 0 && len(pending) == 0 {
			return nil
		}
		if err := rp.commit(ctx, pending, rejects, pendingRead, last.Position, last.Time); err != nil {
			return err
		}
		pending, rejects, pendingRead = pending[:0], nil, 0
		return nil
	}
	err := b.opts.Stream.Read(ctx, rp.position, func(ctx context.Context, sb StreamBatch) error {
		if len(sb.Position) == 0 {
			return errors.New("the stream gave a batch without a position")
		}
		pending = append(pending, sb.Events...)
		rejects = append(rejects, sb.Rejects...)
		pendingRead += sb.Read
		read += sb.Read
		last = sb
		if len(pending) >= b.opts.BatchSize {
			return flush(ctx)
		}
		return nil
	})
	if err == nil {
		err = flush(ctx)
	}
	if err != nil {
		return read, fmt.Errorf("replay: %w", err)
	}
	return read, nil
}

// commit applies one transaction's worth of events read from the stream —
// n records up to pos — and stores pos.
func (rp *replay) commit(ctx context.Context, events []aggregate.Event, rejects []Reject, n int64, pos []byte, at time.Time) error {
	b := rp.b
	bt := b.gate.Prepare(Batch{Events: events, Rejects: rejects, Source: "rebuild:" + b.gen.Key})
	if err := rp.lookup(ctx, bt.Aggregates); err != nil {
		return err
	}
	// Split the batch: the aggregates whose events continue them in memory,
	// and the others, for the gate.
	var bulk, gated []Delivery
	next := map[string]int64{} // the bulk aggregates' new versions
	for i := 0; i < len(bt.Valid); {
		agg := bt.Valid[i].Event.Aggregate
		j := i
		for j < len(bt.Valid) && bt.Valid[j].Event.Aggregate == agg {
			j++
		}
		m := rp.known[agg]
		ok := !m.gated
		for k := i; ok && k < j; k++ {
			ok = bt.Valid[k].Event.Version == m.version+int64(k-i)+1
		}
		if ok {
			bulk = append(bulk, bt.Valid[i:j]...)
			next[agg] = bt.Valid[j-1].Event.Version
		} else {
			gated = append(gated, bt.Valid[i:j]...)
		}
		i = j
	}
	if len(gated) > 0 {
		if err := rp.throughGate(ctx, gated); err != nil {
			return err
		}
	}
	err := rp.bulkTx(ctx, bt, bulk, n, pos, at)
	if err != nil && b.proj.Gate.Refused(err) {
		// The handler (or the database) refused something of the bulk: the
		// gate isolates it — quarantined, or set aside as rejected — and
		// applies the rest.
		b.env.Log.WarnContext(ctx, "rebuild: the replay's batch failed; its aggregates go through the gate",
			"projection", b.proj.Name, "generation", b.gen.Generation, "error", err)
		if err := rp.throughGate(ctx, bulk); err != nil {
			return err
		}
		bulk, next = nil, nil
		err = rp.bulkTx(ctx, bt, nil, n, pos, at)
	}
	if err != nil {
		return err
	}
	for agg, v := range next {
		rp.known[agg] = memAgg{version: v}
	}
	rp.position, rp.positionTime = pos, at
	rp.events += n
	b.gen.Position, b.gen.PositionTime = pos, at
	b.res.Events += n
	b.phaseRead += n
	if len(rp.known) > b.opts.MaxAggregates {
		// Forget them: the next batches look their aggregates up.
		if err := pgx.BeginFunc(ctx, b.conn, func(tx pgx.Tx) error { return rp.ensureIndex(ctx, tx) }); err != nil {
			return err
		}
		clear(rp.known)
		rp.spilled = true
	}
	b.report(false, "")
	return nil
}

// lookup fills known with the aggregates of aggs it lacks, once it may
// lack some (spilled): their last version in the journal (an inline
// projection's: in its rows), and whether the gate has them.
func (rp *replay) lookup(ctx context.Context, aggs []string) error {
	if !rp.spilled {
		return nil
	}
	var missing []string
	for _, a := range aggs {
		if _, ok := rp.known[a]; !ok {
			missing = append(missing, a)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	last := `SELECT max(version) FROM ` + rp.journal + ` j WHERE j.aggregate = k.a`
	if t := rp.inline; t != nil {
		last = `SELECT ` + t.Ref.Version + ` FROM ` + t.Ref.Table + ` WHERE ` + t.Ref.Key + ` = k.a`
	}
	rows, err := rp.b.env.Store.Versions.Gated(ctx, rp.b.conn, rp.b.gen.Key, missing, last)
	if err != nil {
		return fmt.Errorf("look up versions: %w", err)
	}
	var a string
	var m memAgg
	_, err = pgx.ForEachRow(rows, []any{&a, &m.version, &m.gated}, func() error {
		rp.known[a] = m
		return nil
	})
	if err != nil {
		return fmt.Errorf("look up versions: %w", err)
	}
	return nil
}

// throughGate hands the deliveries ds, whole aggregates, to the gate: it
// writes the version rows of those not gated yet, from memory, with their
// journal entries as applied log, then processes them.
func (rp *replay) throughGate(ctx context.Context, ds []Delivery) error {
	b := rp.b
	st := b.env.Store
	var aggs []string
	var vers []int64
	events := make([]aggregate.Event, len(ds))
	for i, d := range ds {
		events[i] = d.Event
		if m := rp.known[d.Event.Aggregate]; !m.gated && (i == 0 || d.Event.Aggregate != ds[i-1].Event.Aggregate) {
			aggs, vers = append(aggs, d.Event.Aggregate), append(vers, m.version)
		}
	}
	if len(aggs) > 0 {
		err := pgx.BeginFunc(ctx, b.conn, func(tx pgx.Tx) error {
			if err := rp.ensureIndex(ctx, tx); err != nil {
				return err
			}
			bt := &pgx.Batch{}
			st.Versions.QueueSeed(bt, b.gen.Key, aggs, vers)
			if rp.inline == nil {
				st.Applied.QueueFromJournal(bt, b.gen.Key, rp.journal, aggs)
			}
			return tx.SendBatch(ctx, bt).Close()
		})
		if err != nil {
			return fmt.Errorf("hand aggregates to the gate: %w", err)
		}
	}
	for _, a := range aggs {
		rp.known[a] = memAgg{gated: true}
	}
	return b.gate.Process(ctx, Batch{Events: events, Source: "rebuild:" + b.gen.Key})
}

// bulkTx applies the bulk deliveries (whole aggregates, each continuing
// its version in memory) through the projection's handler (Target.Apply),
// appends them to the journal, records the batch's rejections and stores
// the replay's position, in one transaction on the replay's connection,
// retrying transient failures. An error the handler or the database
// refused the events with satisfies Gate.Refused.
func (rp *replay) bulkTx(ctx context.Context, bt Prepared, bulk []Delivery, n int64, pos []byte, at time.Time) error {
	b := rp.b
	env := b.env
	events := make([]aggregate.Event, len(bulk))
	aggs, ids := make([]string, len(bulk)), make([]*string, len(bulk))
	vers, hashes := make([]int64, len(bulk)), make([][]byte, len(bulk))
	for i, d := range bulk {
		events[i] = d.Event
		aggs[i], vers[i], hashes[i], ids[i] = d.Event.Aggregate, d.Event.Version, d.Hash, d.ID
	}
	mirror := time.Since(rp.lastMirror) > 2*time.Second
	// A replay transaction that is lost in a crash is replayed: its commit
	// need not wait for the disk.
	head := func(q *pgx.Batch) { q.Queue(`SET LOCAL synchronous_commit = off`) }
	tail := func(q *pgx.Batch) {
		if len(bulk) > 0 && rp.inline == nil {
			q.Queue(`INSERT INTO `+rp.journal+` (aggregate, version, event_id, hash)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bytea[])`, aggs, vers, ids, hashes)
		}
		q.Queue(`UPDATE `+rp.state+` SET position = $1, position_time = $2, events = events + $3`, pos, nullTime(at), n)
		if mirror {
			env.Store.Generations.QueueMirror(q, b.gen.Key, pos, nullTime(at), rp.events+n)
		}
		if bt.QueueRejected != nil {
			bt.QueueRejected(q)
		}
	}
	backoff := env.Policy.Start()
	for {
		err := pgx.BeginFunc(ctx, b.conn, func(tx pgx.Tx) error {
			return b.gate.Apply(ctx, tx, events, head, tail)
		})
		if err == nil {
			if mirror {
				rp.lastMirror = time.Now()
			}
			return nil
		}
		if ctx.Err() != nil || !b.proj.Gate.Transient(err) || b.conn.Conn().IsClosed() {
			if b.conn.Conn().IsClosed() {
				return fmt.Errorf("replay transaction: the connection was lost: %w", err)
			}
			return fmt.Errorf("replay transaction: %w", err)
		}
		ok, werr := backoff.Wait(ctx)
		if werr != nil || !ok {
			return fmt.Errorf("replay transaction: %w", errors.Join(werr, err))
		}
	}
}
