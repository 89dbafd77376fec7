package projection

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inorder/inorder/aggregate"
)

// This file holds the API of inline projections: projections whose own
// row per aggregate carries the gate's state on the fast path (see
// inline_gate.go for the gate's side, and docs/guarantees.md), and what a
// registration keeps of its inline table: the table and the gate's
// statements on it.

// Inline is implemented by projections whose read model has exactly one row
// per aggregate, written by every applied event, that keeps the aggregate's
// version (a payment, an order, an account summary). For such a projection
// the gate keeps no state of its own on the fast path: a batch whose run of
// each aggregate continues the version the row holds, with nothing parked,
// quarantined or in conflict, is applied by the projection's own upsert,
// which carries the compare-and-set (InlineTable.Condition) and the recent
// applied versions (InlineTable.SetLog) — InlineUpsert writes that upsert
// from the read model's columns and adds both. Everything else — a version to
// park, a stale or conflicting delivery, a failing handler, an operator
// action — leaves the fast path for inorder's tables, in the same
// transaction.
//
// The projection's obligations:
//
//   - every applied event writes its aggregate's row: a BatchHandler each
//     aggregate's row once per call (one row per entry of Tx.InlineRuns),
//     an EventHandler once per Apply. InlineUpsert.Queue does the rest; an
//     upsert written by hand goes through Tx.QueueInline, with the version
//     and log of Tx.InlineRuns, and its ON CONFLICT DO UPDATE carries
//     Condition and SetLog;
//   - the row's writes come in aggregate order (byte order), as the events
//     do, and before the handler's writes to rows that several aggregates
//     share, so that concurrent transactions lock rows in one order (see
//     the lock order of Processor.Process);
//   - nothing else changes the version and log columns, no handler deletes
//     a row (the gate takes a row it wrote as there for good), and Reset
//     empties the table (a rebuild replays every version).
//
// InlineTable may return false to keep the gate's state in inorder's version
// rows instead (the general path for every batch).
//
// What it buys (docs/performance.md): on a stream mostly in order an inline
// projection runs close to a hand-written consumer of the same tables (0.95×
// on the ledger example, against 0.74× with version rows); on a heavily
// shuffled one, where most aggregates leave the fast path, it pays for its
// row and the version row both and falls behind version rows.
type Inline interface {
	Projection
	InlineTable() (InlineTable, bool)
}

// InlineTable names the row that carries an inline projection's gate state.
type InlineTable struct {
	// Table is the table, unqualified (found through the search_path, and
	// in a generation's schema when the projection is rebuilt side by side)
	// or qualified by its schema.
	Table pgx.Identifier
	// Key is the column that holds the aggregate id (text, unique).
	Key string
	// Version is the column that holds the aggregate's version (bigint).
	Version string
	// Log is the column that holds the applied log (bytea NOT NULL DEFAULT
	// ''): InlineLogEntries entries of 8 bytes, of the row's last versions,
	// and a last byte past them while the gate marks the row (its
	// aggregate has parked or quarantined versions, or a version the row
	// has not caught up with): Condition refuses a marked row, and the
	// aggregate's next versions take the general path.
	Log string
	// LogEntries is how many of the row's last versions its log keeps: the
	// conflict horizon. A stale redelivery of one of them is checked
	// against the applied event (a duplicate or a conflict); an older one
	// counts as a duplicate without a check, and as Counts.BeyondHorizon
	// (inorder_beyond_horizon_total). Each entry costs 8 bytes of the row,
	// rewritten by every upsert. Default InlineLogEntries (16); at most
	// MaxInlineLogEntries. Changing it takes effect on each row as it is
	// next written.
	LogEntries int
}

// MaxInlineLogEntries bounds InlineTable.LogEntries.
const MaxInlineLogEntries = 1 << 16

// logEntries returns the row log's length in entries (LogEntries, or its
// default), within bounds.
func (t InlineTable) logEntries() int {
	if t.LogEntries <= 0 {
		return InlineLogEntries
	}
	return min(t.LogEntries, MaxInlineLogEntries)
}

// InlineLogEntries is InlineTable.LogEntries's default: how many versions an
// inline row's log keeps. A stale redelivery of one of them is told apart
// from a conflicting one; an older one is counted a duplicate without that
// check (Counts.BeyondHorizon counts them).
const InlineLogEntries = 16

// inlineEntrySize is the size of one entry of an inline row's log.
const inlineEntrySize = 8

// Condition returns the condition for the WHERE clause of the upsert's
// ON CONFLICT DO UPDATE, with alias the upserted table's alias: the row
// moves only from the version before the run it is written with (its
// version less its log's entries), and only if the gate has not marked it
// (see Inline). InlineUpsert adds it; call it for an upsert written by
// hand.
func (t InlineTable) Condition(alias string) string {
	a := pgx.Identifier{alias}.Sanitize() + "."
	v, l := pgx.Identifier{t.Version}.Sanitize(), pgx.Identifier{t.Log}.Sanitize()
	size := strconv.Itoa(inlineEntrySize)
	return a + v + ` = EXCLUDED.` + v + ` - octet_length(EXCLUDED.` + l + `) / ` + size +
		` AND octet_length(` + a + l + `) % ` + size + ` = 0`
}

// SetLog returns the SET item of the upsert's ON CONFLICT DO UPDATE that
// appends the run's log entries to the row's log, keeping the last
// LogEntries. InlineUpsert adds it; call it for an upsert written by hand.
func (t InlineTable) SetLog(alias string) string {
	a := pgx.Identifier{alias}.Sanitize() + "."
	l := pgx.Identifier{t.Log}.Sanitize()
	keep := strconv.Itoa(t.logEntries()*inlineEntrySize - 1)
	return l + ` = substring(` + a + l + ` || EXCLUDED.` + l + ` FROM greatest(octet_length(` + a + l + `) + octet_length(EXCLUDED.` + l + `) - ` + keep + `, 1))`
}

// InlineRun is what an inline projection writes an aggregate's row with:
// the version of the run's last event and the run's log entries (its
// version less the log's entries is the version the row must hold).
type InlineRun struct {
	Aggregate string
	Version   int64
	Log       []byte
}

// InlineEntry returns the log entry of an applied event: 8 bytes of a digest
// of its stable id and payload hash.
func InlineEntry(e aggregate.Event) []byte {
	return inlineEntry(e.Aggregate, e.Version, e.StableID(), e.Hash())
}

// inlineEntry is InlineEntry of a delivery: the payload hash's first bytes
// when the id is the default one (it follows from the version), else a
// digest of both.
func inlineEntry(agg string, version int64, id string, hash []byte) []byte {
	if isDefaultID(id, agg, version) {
		return hash[:inlineEntrySize:inlineEntrySize]
	}
	h := sha256.New()
	h.Write([]byte(id))
	h.Write([]byte{0})
	h.Write(hash)
	return h.Sum(nil)[:inlineEntrySize]
}

// inlineSQL are the gate's statements on an inline projection's table.
type inlineSQL struct {
	lock, prepare, mark, exist string
}

func newInlineSQL(t *InlineTable) inlineSQL {
	tbl := t.Table.Sanitize()
	k, v, l := pgx.Identifier{t.Key}.Sanitize(), pgx.Identifier{t.Version}.Sanitize(), pgx.Identifier{t.Log}.Sanitize()
	size := strconv.Itoa(inlineEntrySize)
	// entries is a row's log without its mark.
	entries := `substring(t.` + l + ` FOR octet_length(t.` + l + `) / ` + size + ` * ` + size + `)`
	// gapBytes is the size of the zero entries of the versions a row
	// catches up with (at most a log's worth).
	gapBytes := size + ` * least(greatest(k.version - t.` + v + `, 0), ` + strconv.Itoa(t.logEntries()) + `)::int`
	return inlineSQL{
		// exist counts the rows of $1 that exist.
		exist: `SELECT count(*) FROM ` + tbl + ` WHERE ` + k + ` = ANY($1::text[])`,
		// lock locks the rows of $1 (sorted), one probe each, and returns
		// their versions and logs — no log for a row at the version $2
		// expects of it (a mixed attempt's fast aggregate, whose log is
		// not read; -1 wants every log).
		lock: `SELECT k.aggregate, t.version, CASE WHEN t.version = k.expect THEN NULL ELSE t.log END
FROM unnest($1::text[], $2::bigint[]) AS k(aggregate, expect)
CROSS JOIN LATERAL (SELECT ` + v + ` AS version, ` + l + ` AS log FROM ` + tbl + `
  WHERE ` + k + ` = k.aggregate OFFSET 0 FOR UPDATE) t`,
		// prepare readies rows the transaction holds for the handler to
		// apply runs to: it clears their marks and moves them up to the
		// versions of $2 (an operator's gap), logging a zero entry for each
		// version skipped (inlineGap), the last LogEntries kept.
		prepare: `UPDATE ` + tbl + ` AS t SET ` + v + ` = greatest(t.` + v + `, k.version),
  ` + l + ` = substring(` + entries + ` || decode(repeat('00', ` + gapBytes + `), 'hex')
    FROM greatest(octet_length(` + entries + `) + ` + gapBytes + ` - ` + strconv.Itoa(t.logEntries()*inlineEntrySize-1) + `, 1))
FROM unnest($1::text[], $2::bigint[]) AS k(aggregate, version)
WHERE t.` + k + ` = k.aggregate AND (t.` + v + ` < k.version OR octet_length(t.` + l + `) % ` + size + ` <> 0)`,
		// mark sets the marks of the rows of $1 whose $2 is true and clears
		// those of the others (rows the transaction holds, sorted).
		mark: `UPDATE ` + tbl + ` AS t SET ` + l + ` = CASE WHEN k.mark THEN ` + entries + ` || '\x00'::bytea ELSE ` + entries + ` END
FROM unnest($1::text[], $2::bool[]) AS k(aggregate, mark)
WHERE t.` + k + ` = k.aggregate`,
	}
}

// inlineState is an inline projection's table, as a registration reaches
// it, and the gate's statements on it.
type inlineState struct {
	table InlineTable
	sql   inlineSQL
}

// inlineTable returns r's inline table, qualified by its generation's
// schema when unqualified, or nil if r is not inline.
func (r *registered) inlineTable() *InlineTable {
	if st := r.inlineState(); st != nil {
		return &st.table
	}
	return nil
}

// inlineSQL returns the gate's statements on r's inline table (r must be
// inline).
func (r *registered) inlineSQL() *inlineSQL { return &r.inlineState().sql }

// inlineState finds r's inline table once and builds its statements.
func (r *registered) inlineState() *inlineState {
	r.inlineOnce.Do(func() {
		if t := inlineTableIn(r.p, r.schema); t != nil {
			r.inline = &inlineState{table: *t, sql: newInlineSQL(t)}
		}
	})
	return r.inline
}

// inlineTableIn returns p's inline table, qualified by schema when
// unqualified, or nil if p is not inline.
func inlineTableIn(p Projection, schema string) *InlineTable {
	in, ok := p.(Inline)
	if !ok {
		return nil
	}
	t, ok := in.InlineTable()
	if !ok {
		return nil
	}
	if len(t.Table) == 1 && schema != "" {
		t.Table = pgx.Identifier{schema, t.Table[0]}
	}
	return &t
}

// InlineRuns returns, for an inline projection's handler, the run of each
// aggregate of the events it is given, in their order; nil for other
// projections.
func (t *Tx) InlineRuns() []InlineRun {
	switch {
	case t.inline == nil:
		return nil
	case t.inline.event >= 0:
		return t.inline.runs[t.inline.event : t.inline.event+1]
	}
	return t.inline.runs
}

// QueueInline queues the upsert of an inline projection's rows, written by
// hand (see Inline; InlineUpsert.Queue calls it): the rows it writes are
// counted, and a count short of the
// aggregates the handler applies tells the gate that a row was not where the
// events continue it (the compare-and-set did not match).
func (t *Tx) QueueInline(sql string, args ...any) {
	in := t.inline
	t.batch.Queue(sql, args...).Exec(func(ct pgconn.CommandTag) error {
		if in != nil {
			in.got += ct.RowsAffected()
		}
		return nil
	})
}

// setInline prepares t for r's handler applying events, whose log entries
// are entries (nil: computed from the events).
func (t *Tx) setInline(r *registered, events []aggregate.Event, entries [][]byte) {
	if r.inlineTable() == nil {
		t.inline = nil
		return
	}
	runs := inlineRuns(events, entries, r.batch != nil)
	t.inline = &inlineTx{runs: runs, event: -1, want: int64(len(runs))}
}

// inlineRuns returns the runs of events (sorted by aggregate and version),
// whose log entries are entries (nil: computed from the events): one per
// aggregate for a BatchHandler (perBatch), else one per event.
func inlineRuns(events []aggregate.Event, entries [][]byte, perBatch bool) []InlineRun {
	if len(events) == 0 {
		return nil
	}
	runs := make([]InlineRun, 0, len(events))
	// Every run's log is a piece of one buffer, capped so that appending
	// to one cannot reach the next.
	logs := make([]byte, 0, len(events)*inlineEntrySize)
	start := 0
	for i, e := range events {
		entry := []byte(nil)
		if entries != nil {
			entry = entries[i]
		} else {
			entry = inlineEntry(e.Aggregate, e.Version, e.StableID(), e.Hash())
		}
		if n := len(runs); n > 0 && runs[n-1].Aggregate == e.Aggregate && perBatch {
			runs[n-1].Version = e.Version
			logs = append(logs, entry...)
			continue
		}
		if n := len(runs); n > 0 {
			runs[n-1].Log = logs[start:len(logs):len(logs)]
		}
		start = len(logs)
		logs = append(logs, entry...)
		runs = append(runs, InlineRun{Aggregate: e.Aggregate, Version: e.Version})
	}
	if n := len(runs); n > 0 {
		runs[n-1].Log = logs[start:len(logs):len(logs)]
	}
	return runs
}

// errInlineMiss reports that an inline projection's fast path did not hold:
// the attempt takes the general path.
var errInlineMiss = errors.New("projection: inline fast path missed")

// inlineShort returns an error if t's handler wrote fewer inline rows than
// it applies aggregates (call it once the queued statements are sent).
func (t *Tx) inlineShort(projection string) error {
	if t.inline == nil || t.inline.got == t.inline.want {
		return nil
	}
	return fmt.Errorf("%w: inline projection %s wrote %d of its %d rows (its upsert must go through InlineUpsert.Queue, or Tx.QueueInline with InlineTable.Condition)",
		errInlineMiss, projection, t.inline.got, t.inline.want)
}

// inlineRow is an inline projection's row of an aggregate, as the general
// path locked it.
type inlineRow struct {
	version int64
	log     []byte
	found   bool // lockInlineOne found the row
}

// marked reports whether the gate marked an inline row (see Inline).
func (row inlineRow) marked() bool { return len(row.log)%inlineEntrySize != 0 }
