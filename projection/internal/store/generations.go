package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Generations is the generations table: per projection, its generations —
// the read models built by one code version, each with its gate key and
// schema — and their states (building, catchup, live, previous, failed,
// retired, dropped) and the phases of the rebuild that works on one. A few
// of its statements move the generation epoch too (epoch.go), in the same
// statement.
type Generations struct {
	table, epoch string // qualified
}

func newGenerations(t qualify) Generations {
	return Generations{table: t("generations"), epoch: t("generation_epoch")}
}

// columns are the columns scanGeneration reads, in its order.
const columns = `projection, generation, code_version, key, schema, state, phase, position, position_time, events,
  error, keep_until, created_at, updated_at, live_at, ended_at`

// Generation is one row of the generations table. A NULL timestamp is the
// zero time.
type Generation struct {
	Projection   string
	Generation   int
	CodeVersion  int
	Key          string
	Schema       string
	State        string
	Phase        string
	Position     []byte
	PositionTime time.Time
	Events       int64
	Error        string
	KeepUntil    time.Time
	CreatedAt    time.Time
	UpdatedAt    time.Time
	LiveAt       time.Time
	EndedAt      time.Time
}

// scanGeneration reads a row of columns.
func scanGeneration(row pgx.CollectableRow) (Generation, error) {
	var g Generation
	var pt, keep, live, ended *time.Time
	err := row.Scan(&g.Projection, &g.Generation, &g.CodeVersion, &g.Key, &g.Schema, &g.State, &g.Phase, &g.Position, &pt,
		&g.Events, &g.Error, &keep, &g.CreatedAt, &g.UpdatedAt, &live, &ended)
	for _, f := range []struct {
		from *time.Time
		to   *time.Time
	}{{pt, &g.PositionTime}, {keep, &g.KeepUntil}, {live, &g.LiveAt}, {ended, &g.EndedAt}} {
		if f.from != nil {
			*f.to = *f.from
		}
	}
	return g, err
}

// List returns every generation of projection, dropped ones included, by
// generation.
func (g *Generations) List(ctx context.Context, q querier, projection string) ([]Generation, error) {
	rows, err := q.Query(ctx, `SELECT `+columns+` FROM `+g.table+`
WHERE projection = $1 ORDER BY generation`, projection)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanGeneration)
}

// QueueList queues the read of the generations of projections that are not
// dropped, by projection and generation; fn receives them, one at a time,
// when the batch is sent.
func (g *Generations) QueueList(b *pgx.Batch, projections []string, fn func(Generation)) {
	b.Queue(`SELECT `+columns+` FROM `+g.table+`
WHERE projection = ANY($1) AND state <> 'dropped' ORDER BY projection, generation`, projections).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			gen, err := scanGeneration(rows)
			if err != nil {
				return err
			}
			fn(gen)
		}
		return rows.Err()
	})
}

// QueueOthers queues the read of the projections, other than projections,
// that have a generation that is not dropped: one row of a text array, in
// order.
func (g *Generations) QueueOthers(b *pgx.Batch, projections []string) *pgx.QueuedQuery {
	return b.Queue(`SELECT coalesce(array_agg(DISTINCT projection ORDER BY projection), '{}') FROM `+g.table+`
WHERE projection <> ALL($1) AND state <> 'dropped'`, projections)
}

// Ref is a generation as the listings name it: the projection and number
// of a gate key, and its state.
type Ref struct {
	Projection string
	Generation int
	Key        string
	State      string
}

// Refs returns every generation of every projection, in no order.
func (g *Generations) Refs(ctx context.Context, q querier) ([]Ref, error) {
	rows, err := q.Query(ctx, `SELECT projection, generation, key, state FROM `+g.table)
	if err != nil {
		return nil, err
	}
	var out []Ref
	var r Ref
	_, err = pgx.ForEachRow(rows, []any{&r.Projection, &r.Generation, &r.Key, &r.State}, func() error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// Fed is a generation that processors feed (live, in catch-up or
// previous), as a processor's view of them needs it. A NULL keep_until is
// the zero time.
type Fed struct {
	Projection  string
	Generation  int
	CodeVersion int
	Key         string
	Schema      string
	State       string
	KeepUntil   time.Time
}

// Fed returns the generations of projections that processors feed, by
// projection and generation, and the generation epoch, read in one
// statement (so in one snapshot).
func (g *Generations) Fed(ctx context.Context, q querier, projections []string) ([]Fed, int64, error) {
	rows, err := q.Query(ctx, `SELECT (SELECT epoch FROM `+g.epoch+`), projection, generation, code_version, key, schema, state, keep_until
FROM `+g.table+` WHERE projection = ANY($1) AND state IN ('live', 'catchup', 'previous')
ORDER BY projection, generation`, projections)
	if err != nil {
		return nil, 0, err
	}
	var out []Fed
	var ep int64
	var keep *time.Time
	var f Fed
	_, err = pgx.ForEachRow(rows, []any{&ep, &f.Projection, &f.Generation, &f.CodeVersion, &f.Key, &f.Schema, &f.State, &keep}, func() error {
		f.KeepUntil = time.Time{}
		if keep != nil {
			f.KeepUntil = *keep
		}
		out = append(out, f)
		return nil
	})
	return out, ep, err
}

// Settle records generation 1, live, of each of projections that has no
// generation yet (code version versions[i]: the first processor to run
// decides it), retires their previous generations whose retention ended,
// and moves the generation epoch if it did either: one statement.
func (g *Generations) Settle(ctx context.Context, q querier, projections []string, versions []int32) error {
	_, err := q.Exec(ctx, `WITH ins AS (
  INSERT INTO `+g.table+` (projection, generation, code_version, key, state, live_at)
  SELECT u.n, 1, u.v, u.n, 'live', now() FROM unnest($1::text[], $2::int[]) AS u(n, v)
  WHERE NOT EXISTS (SELECT 1 FROM `+g.table+` g WHERE g.projection = u.n)
  ON CONFLICT DO NOTHING RETURNING 1),
ret AS (
  UPDATE `+g.table+` SET state = 'retired', ended_at = now(), updated_at = now()
  WHERE projection = ANY($1) AND state = 'previous' AND keep_until <= now() RETURNING 1)
UPDATE `+g.epoch+` SET epoch = epoch + 1 WHERE EXISTS (SELECT 1 FROM ins) OR EXISTS (SELECT 1 FROM ret)`, projections, versions)
	return err
}

// LiveKey returns an SQL expression of the gate key of the live generation
// of the projection named by the parameter $n (the name itself when it has
// none recorded), for the statements of other tables that read the live
// generation's rows.
func (g *Generations) LiveKey(n int) string {
	return fmt.Sprintf(`coalesce((SELECT key FROM %s WHERE projection = $%d AND state = 'live'), $%d)`, g.table, n, n)
}

// liveSchema puts the schema of the live generation of projection $1 first
// on the transaction's search_path (nothing for generation 1, whose tables
// are in the connection's search_path).
func (g *Generations) liveSchema() string {
	return `SELECT set_config('search_path',
  CASE WHEN current_setting('search_path') = '' THEN quote_ident(schema)
       ELSE quote_ident(schema) || ', ' || current_setting('search_path') END, true)
FROM ` + g.table + ` WHERE projection = $1 AND state = 'live' AND schema <> ''`
}

// QueueEnterLive queues the statement that puts the schema of projection's
// live generation first on the transaction's search_path (see EnterLive).
func (g *Generations) QueueEnterLive(b *pgx.Batch, projection string) *pgx.QueuedQuery {
	return b.Queue(g.liveSchema(), projection)
}

// EnterLive puts the schema of projection's live generation first on the
// search_path of the transaction q (a transaction); generation 1, whose
// tables are in the connection's search_path, changes nothing.
func (g *Generations) EnterLive(ctx context.Context, q querier, projection string) error {
	_, err := q.Exec(ctx, g.liveSchema(), projection)
	return err
}

// PhaseState returns the phase and the state of the generation with gate
// key key.
func (g *Generations) PhaseState(ctx context.Context, q querier, key string) (phase, state string, err error) {
	err = q.QueryRow(ctx, `SELECT phase, state FROM `+g.table+` WHERE key = $1`, key).Scan(&phase, &state)
	return phase, state, err
}

// LockFed locks the generations of projection that processors feed (live,
// in catch-up, previous) and returns them by generation.
func (g *Generations) LockFed(ctx context.Context, q querier, projection string) ([]Generation, error) {
	rows, err := q.Query(ctx, `SELECT `+columns+` FROM `+g.table+`
WHERE projection = $1 AND state IN ('live', 'catchup', 'previous') ORDER BY generation FOR UPDATE`, projection)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanGeneration)
}

// LockLive locks the live and the previous generation of projection and
// returns their numbers (0: none) and when the previous one's retention
// ends (nil: never, or no previous one).
func (g *Generations) LockLive(ctx context.Context, q querier, projection string) (live, previous int, keepUntil *time.Time, err error) {
	rows, err := q.Query(ctx, `SELECT generation, state, keep_until FROM `+g.table+`
WHERE projection = $1 AND state IN ('live', 'previous') FOR UPDATE`, projection)
	if err != nil {
		return 0, 0, nil, err
	}
	var gen int
	var state string
	var ku *time.Time
	_, err = pgx.ForEachRow(rows, []any{&gen, &state, &ku}, func() error {
		if state == "live" {
			live = gen
		} else {
			previous, keepUntil = gen, ku
		}
		return nil
	})
	return live, previous, keepUntil, err
}

// Next returns the number of projection's next generation: one more than
// its last (1 when it has none).
func (g *Generations) Next(ctx context.Context, q querier, projection string) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT coalesce(max(generation), 0) + 1 FROM `+g.table+` WHERE projection = $1`, projection).Scan(&n)
	return n, err
}

// Insert records generation of projection, built by code version
// codeVersion, with gate key key and read-model schema schema, in state
// building and phase replay, and returns its row.
func (g *Generations) Insert(ctx context.Context, q querier, projection string, generation, codeVersion int, key, schema string) (Generation, error) {
	rows, err := q.Query(ctx, `INSERT INTO `+g.table+` (projection, generation, code_version, key, schema, state, phase)
VALUES ($1, $2, $3, $4, $5, 'building', 'replay') RETURNING `+columns, projection, generation, codeVersion, key, schema)
	if err != nil {
		return Generation{}, err
	}
	return pgx.CollectExactlyOneRow(rows, scanGeneration)
}

// SetPhase records the phase of the generation with gate key key.
func (g *Generations) SetPhase(ctx context.Context, q querier, key, phase string) error {
	_, err := q.Exec(ctx, `UPDATE `+g.table+` SET phase = $2, updated_at = now() WHERE key = $1`, key, phase)
	return err
}

// RequestSwitch moves generation of projection, in catch-up, from phase
// ready to phase requested; false when it is not in catch-up in phase
// ready (nothing changed).
func (g *Generations) RequestSwitch(ctx context.Context, q querier, projection string, generation int, requested, ready string) (bool, error) {
	tag, err := q.Exec(ctx, `UPDATE `+g.table+` SET phase = $3, updated_at = now()
WHERE projection = $1 AND generation = $2 AND state = 'catchup' AND phase = $4`, projection, generation, requested, ready)
	return tag.RowsAffected() > 0, err
}

// Advance records that a rebuild read the stream of the generation with
// gate key key up to position (the source's time there: at, nil for none),
// n more events.
func (g *Generations) Advance(ctx context.Context, q querier, key string, position []byte, at *time.Time, n int64) error {
	_, err := q.Exec(ctx, `UPDATE `+g.table+`
SET position = $2, position_time = $3, events = events + $4, updated_at = now() WHERE key = $1`, key, position, at, n)
	return err
}

// QueueMirror queues the record of where the replay of the generation with
// gate key key stands — position, at (nil for none), events read in all —
// as the replay's own state says (a copy, for the operator views).
func (g *Generations) QueueMirror(b *pgx.Batch, key string, position []byte, at *time.Time, events int64) *pgx.QueuedQuery {
	return b.Queue(`UPDATE `+g.table+`
SET position = $2, position_time = $3, events = $4, updated_at = now() WHERE key = $1`, key, position, at, events)
}

// QueueFinalize queues the move of the generation with gate key key, whose
// replay ended at position (at, events as in QueueMirror), to catch-up.
func (g *Generations) QueueFinalize(b *pgx.Batch, key string, position []byte, at *time.Time, events int64) *pgx.QueuedQuery {
	return b.Queue(`UPDATE `+g.table+`
SET state = 'catchup', phase = 'catch-up', position = $2, position_time = $3, events = $4, updated_at = now() WHERE key = $1`,
		key, position, at, events)
}

// QueueSwitch queues the switch of the generation with gate key key in as
// projection's live generation: its previous generation is retired, and
// its live one becomes previous, fed for retention more (retired at once
// when retention is negative). Three statements, in that order, the new
// one's last.
func (g *Generations) QueueSwitch(b *pgx.Batch, projection, key string, retention time.Duration) {
	b.Queue(`UPDATE `+g.table+` SET state = 'retired', phase = '', ended_at = now(), updated_at = now()
WHERE projection = $1 AND state = 'previous'`, projection)
	if retention < 0 {
		b.Queue(`UPDATE `+g.table+` SET state = 'retired', phase = '', ended_at = now(), updated_at = now()
WHERE projection = $1 AND state = 'live'`, projection)
	} else {
		b.Queue(`UPDATE `+g.table+` SET state = 'previous', phase = '', keep_until = now() + $2, updated_at = now()
WHERE projection = $1 AND state = 'live'`, projection, retention)
	}
	b.Queue(`UPDATE `+g.table+` SET state = 'live', phase = '', error = '', live_at = now(), updated_at = now()
WHERE key = $1`, key)
}

// QueueFail queues the move of the generation with gate key key to failed,
// for reason.
func (g *Generations) QueueFail(b *pgx.Batch, key, reason string) *pgx.QueuedQuery {
	return b.Queue(`UPDATE `+g.table+` SET state = 'failed', phase = '', error = $2, ended_at = now(), updated_at = now()
WHERE key = $1`, key, reason)
}

// QueueRollback queues the rollback of projection: its live generation
// becomes previous, fed until keepUntil (nil: no end), and its previous
// generation live again. Two statements, in that order.
func (g *Generations) QueueRollback(b *pgx.Batch, projection string, live, previous int, keepUntil *time.Time) {
	b.Queue(`UPDATE `+g.table+` SET state = 'previous', keep_until = $3, updated_at = now()
WHERE projection = $1 AND generation = $2`, projection, live, keepUntil)
	b.Queue(`UPDATE `+g.table+` SET state = 'live', keep_until = NULL, live_at = now(), updated_at = now()
WHERE projection = $1 AND generation = $2`, projection, previous)
}

// QueueRetire queues the retirement of the generation with gate key key,
// unless it is live: nobody feeds it any more.
func (g *Generations) QueueRetire(b *pgx.Batch, key string) *pgx.QueuedQuery {
	return b.Queue(`UPDATE `+g.table+` SET state = 'retired', phase = '', ended_at = coalesce(ended_at, now()), updated_at = now()
WHERE key = $1 AND state <> 'live'`, key)
}

// QueueDropped queues the record that the tables and gate rows of the
// generation with gate key key are gone.
func (g *Generations) QueueDropped(b *pgx.Batch, key string) *pgx.QueuedQuery {
	return b.Queue(`UPDATE `+g.table+` SET state = 'dropped', updated_at = now() WHERE key = $1`, key)
}
