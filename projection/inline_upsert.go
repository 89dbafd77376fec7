package projection

import (
	"cmp"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// This file holds InlineUpsert: an inline projection's upsert, written for
// its author from what the read model is, with the gate's storage rules
// (InlineTable.Condition and SetLog) added.

// InlineUpsert is the upsert of an inline projection's rows (see Inline),
// described by what the read model is: its table, the columns a row holds
// besides the key, version and log, and what each becomes when the row
// exists. Queue writes the statement and sends it with the gate's storage
// rules added — the compare-and-set (InlineTable.Condition) and the applied
// log (InlineTable.SetLog) — so that the projection says only what its rows
// hold, and need not know the protocol of Inline.
//
// Queue writes every row of a handler call with one statement, from arrays
// (unnest), one element per aggregate: a BatchHandler passes one element per
// aggregate of its events (one per entry of Tx.InlineRuns), in the events'
// order; an EventHandler one element, its event's. The statement, for
// columns c1…cn of types T1…Tn, is
//
//	INSERT INTO table AS alias (key, c1, …, cn, version, log)
//	SELECT * FROM unnest($1::text[], $2::T1[], …, $n+1::Tn[], $n+2::bigint[], $n+3::bytea[])
//	ON CONFLICT (key) DO UPDATE SET c1 = <update>, …, version = EXCLUDED.version, <Set…>, <SetLog>
//	WHERE <Condition>
//
// When the handler does not run on the gate's inline path (Tx.InlineRuns
// returns nil: the projection's InlineTable returned false, or Apply ran it
// outside a Processor), Queue sends the same upsert without the log column,
// SetLog and Condition — the projection's plain upsert, so that one handler
// serves both (SQL returns either statement).
//
// An InlineUpsert is a description, safe for concurrent use; make one per
// projection and reuse it.
type InlineUpsert struct {
	// Table is the projection's inline table, as its InlineTable method
	// returns it (Table, Key, Version, Log, LogEntries).
	Table InlineTable
	// Alias is the table's alias in the statement, by which Update
	// expressions and Set name the row as it stands; empty: no alias, and
	// the row is named by the table's unqualified name.
	Alias string
	// Columns are the row's columns besides Table.Key, Table.Version and
	// Table.Log, in the order of Queue's values.
	Columns []InlineColumn
	// Set are more items of the update's SET list, written after the
	// columns' and the version's: for columns the upsert does not insert
	// ("updated_at = now()").
	Set []string
}

// InlineColumn is a column of an inline projection's row, as InlineUpsert
// writes it.
type InlineColumn struct {
	// Name is the column's name.
	Name string
	// Type is the SQL type of the column's values ("text", "bigint",
	// "jsonb"): Queue's values for the column are sent as an array of it.
	Type string
	// Update is what the column becomes when the row exists: an SQL
	// expression of the row as it stands (Alias.column) and of the values
	// written (EXCLUDED.column). Empty: the value written,
	// EXCLUDED.Name.
	Update string
	// InsertOnly keeps the column's value when the row exists: it is
	// written only by the row's insert (Update is then ignored).
	InsertOnly bool
}

// alias returns the name by which u's statement refers to the row as it
// stands: Alias, or the table's unqualified name.
func (u InlineUpsert) alias() string {
	if u.Alias != "" || len(u.Table.Table) == 0 {
		return u.Alias
	}
	return u.Table.Table[len(u.Table.Table)-1]
}

// SQL returns u's statement: with inline, as Queue sends it on the gate's
// inline path (the log column, SetLog and Condition included); without, the
// plain upsert. Its parameters are the arrays of the keys ($1), of each
// column of Columns ($2…), of the versions and, with inline, of the log
// entries.
func (u InlineUpsert) SQL(inline bool) string {
	ident := func(s string) string { return pgx.Identifier{s}.Sanitize() }
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(u.Table.Table.Sanitize())
	if u.Alias != "" {
		b.WriteString(" AS ")
		b.WriteString(ident(u.Alias))
	}
	names := make([]string, 0, len(u.Columns)+3)
	types := make([]string, 0, len(u.Columns)+3)
	names, types = append(names, ident(u.Table.Key)), append(types, "text")
	for _, c := range u.Columns {
		names, types = append(names, ident(c.Name)), append(types, c.Type)
	}
	names, types = append(names, ident(u.Table.Version)), append(types, "bigint")
	if inline {
		names, types = append(names, ident(u.Table.Log)), append(types, "bytea")
	}
	b.WriteString(" (")
	b.WriteString(strings.Join(names, ", "))
	b.WriteString(")\nSELECT * FROM unnest(")
	for i, t := range types {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(i+1) + "::" + t + "[]")
	}
	b.WriteString(")\nON CONFLICT (")
	b.WriteString(ident(u.Table.Key))
	b.WriteString(") DO UPDATE SET ")
	set := make([]string, 0, len(u.Columns)+len(u.Set)+2)
	for _, c := range u.Columns {
		if c.InsertOnly {
			continue
		}
		n := ident(c.Name)
		set = append(set, n+" = "+cmp.Or(c.Update, "EXCLUDED."+n))
	}
	v := ident(u.Table.Version)
	set = append(set, v+" = EXCLUDED."+v)
	set = append(set, u.Set...)
	if inline {
		set = append(set, u.Table.SetLog(u.alias()))
	}
	b.WriteString(strings.Join(set, ", "))
	if inline {
		b.WriteString("\nWHERE ")
		b.WriteString(u.Table.Condition(u.alias()))
	}
	return b.String()
}

// Queue queues on tx the upsert of the rows of keys (aggregate ids), at
// versions (each row's version: its aggregate's last event of the call),
// with values: one slice per column of Columns, in their order, each with
// one element per key. On the gate's inline path (Tx.InlineRuns not nil)
// the keys and versions must be those of tx's inline runs, in their order;
// Queue adds the runs' log entries and sends the statement through
// Tx.QueueInline, so the gate counts the rows it wrote. Otherwise it sends
// the plain upsert with Tx.Queue. It queues nothing for no keys.
//
// It returns an error, and queues nothing, if the values are not as many
// as the columns, a value is not a slice as long as keys, or the keys and
// versions are not those of the inline runs.
func (u InlineUpsert) Queue(tx *Tx, keys []string, versions []int64, values ...any) error {
	if len(values) != len(u.Columns) {
		return fmt.Errorf("projection: upsert of %s: %d values for %d columns", u.Table.Table.Sanitize(), len(values), len(u.Columns))
	}
	if len(versions) != len(keys) {
		return fmt.Errorf("projection: upsert of %s: %d versions for %d keys", u.Table.Table.Sanitize(), len(versions), len(keys))
	}
	for i, v := range values {
		rv := reflect.ValueOf(v)
		if rv.Kind() != reflect.Slice || rv.Len() != len(keys) {
			return fmt.Errorf("projection: upsert of %s: column %s: want a slice of %d values, got %T", u.Table.Table.Sanitize(), u.Columns[i].Name, len(keys), v)
		}
	}
	runs := tx.InlineRuns()
	if runs == nil {
		if len(keys) > 0 {
			args := make([]any, 0, len(values)+2)
			args = append(append(append(args, keys), values...), versions)
			tx.Queue(u.SQL(false), args...)
		}
		return nil
	}
	if len(runs) != len(keys) {
		return fmt.Errorf("projection: upsert of %s: %d rows to write, %d inline runs", u.Table.Table.Sanitize(), len(keys), len(runs))
	}
	if len(keys) == 0 {
		return nil
	}
	logs := make([][]byte, len(runs))
	for i, ru := range runs {
		if ru.Aggregate != keys[i] || ru.Version != versions[i] {
			return fmt.Errorf("projection: upsert of %s: row %s v%d written with the inline run of %s v%d", u.Table.Table.Sanitize(), keys[i], versions[i], ru.Aggregate, ru.Version)
		}
		logs[i] = ru.Log
	}
	args := make([]any, 0, len(values)+3)
	args = append(append(append(args, keys), values...), versions, logs)
	tx.QueueInline(u.SQL(true), args...)
	return nil
}
