package projection

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// This file holds Sums, the helper for the writes projections make to
// shared rows.

// SumKey is the type of the key column of a table Sums writes to: a text
// (~string), bigint (~int64) or integer (~int32) key.
type SumKey interface {
	~string | ~int64 | ~int32
}

// Sums accumulates additive changes to shared rows — counters, stock,
// balances: rows that the events of many aggregates update — and writes
// them with one set-based upsert per transaction, in one key order.
//
// The key order is what keeps concurrent writers free of deadlocks. Two
// transactions that update the same hot rows in different orders (a
// statement like UPDATE … FROM unnest(…) locks them in whatever order its
// plan visits them) can each hold a row the other waits for; PostgreSQL
// then aborts one of them after deadlock_timeout (1 s by default) and the
// processor retries it — a second lost per deadlock, and more with every
// worker added. Transactions that lock the shared rows in the same order
// cannot deadlock on them: every writer that goes through Sums, with the
// processor's workers partitioned by aggregate or competing for the same
// aggregates, upserts in ascending key order (bytewise for text keys: Go's
// string order, PostgreSQL's COLLATE "C").
//
// Use one Sums per table and transaction, in a BatchHandler: Add the
// batch's changes, then Queue the upsert. A projection that writes several
// shared tables must queue them in the same table order in every
// transaction. An EventHandler's Queue per event would lock the rows of
// each event in key order but the events in delivery order: a projection
// whose events update shared rows should be a BatchHandler.
//
// The table needs a unique index on the key column (its primary key). A
// row that does not exist yet is inserted with the accumulated changes as
// its values (its other columns take their defaults); one that exists has
// the changes added to its columns. A Sums is not safe for concurrent use.
type Sums[K SumKey] struct {
	sql     string
	columns int
	index   map[K]int // key → offset of its sums in vals / len(columns)
	keys    []K
	vals    []int64
}

// NewSums returns a Sums that adds to the bigint columns of table, keyed by
// its key column. It panics if no column is given.
func NewSums[K SumKey](table pgx.Identifier, key string, columns ...string) *Sums[K] {
	if len(columns) == 0 {
		panic("projection: NewSums needs at least one column")
	}
	var keyType string
	switch reflect.TypeFor[K]().Kind() {
	case reflect.String:
		keyType = "text"
	case reflect.Int64:
		keyType = "bigint"
	default:
		keyType = "integer"
	}
	var b strings.Builder
	ident := func(s string) string { return pgx.Identifier{s}.Sanitize() }
	names := make([]string, 0, len(columns)+1)
	names = append(names, ident(key))
	for _, c := range columns {
		names = append(names, ident(c))
	}
	// The upsert takes the rows in the order of the arrays (WITH
	// ORDINALITY … ORDER BY), which Queue sorts: the rows are inserted, or
	// locked and updated, in that order.
	fmt.Fprintf(&b, "INSERT INTO %s AS inorder_t (%s)\nSELECT %s FROM unnest($1::%s[]", table.Sanitize(), strings.Join(names, ", "),
		columnList("u.c", len(columns)+1), keyType)
	for i := range columns {
		fmt.Fprintf(&b, ", $%d::bigint[]", i+2)
	}
	fmt.Fprintf(&b, ") WITH ORDINALITY AS u(%s, n) ORDER BY u.n\nON CONFLICT (%s) DO UPDATE SET ", columnList("c", len(columns)+1), ident(key))
	for i, c := range columns {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s = inorder_t.%s + EXCLUDED.%s", ident(c), ident(c), ident(c))
	}
	return &Sums[K]{sql: b.String(), columns: len(columns), index: map[K]int{}}
}

// columnList returns "<prefix>0, <prefix>1, …" for n columns.
func columnList(prefix string, n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return strings.Join(s, ", ")
}

// Add adds deltas, one per column in NewSums' order, to the row of key. It
// panics if the number of deltas is not the number of columns.
func (s *Sums[K]) Add(key K, deltas ...int64) {
	if len(deltas) != s.columns {
		panic(fmt.Sprintf("projection: Sums.Add: %d deltas for %d columns", len(deltas), s.columns))
	}
	i, ok := s.index[key]
	if !ok {
		i = len(s.keys)
		s.index[key] = i
		s.keys = append(s.keys, key)
		s.vals = append(s.vals, deltas...)
		return
	}
	for c, d := range deltas {
		s.vals[i*s.columns+c] += d
	}
}

// Get returns the accumulated deltas of key (nil if none was added).
func (s *Sums[K]) Get(key K) []int64 {
	i, ok := s.index[key]
	if !ok {
		return nil
	}
	return slices.Clone(s.vals[i*s.columns : (i+1)*s.columns])
}

// Len returns how many keys have changes.
func (s *Sums[K]) Len() int { return len(s.keys) }

// Sorted returns the keys in the order Queue writes them, ascending, and
// their deltas (deltas[c][i] is column c's change of keys[i]): the arrays
// of the upsert, for a projection that writes them with a statement of its
// own.
func (s *Sums[K]) Sorted() (keys []K, deltas [][]int64) {
	keys = slices.Clone(s.keys)
	slices.Sort(keys)
	deltas = make([][]int64, s.columns)
	for c := range deltas {
		deltas[c] = make([]int64, len(keys))
	}
	for i, k := range keys {
		off := s.index[k] * s.columns
		for c := range deltas {
			deltas[c][i] = s.vals[off+c]
		}
	}
	return keys, deltas
}

// Queue queues the upsert of every accumulated change on tx, in ascending
// key order, and empties s for the next transaction. It queues nothing and
// returns nil when nothing was added.
func (s *Sums[K]) Queue(tx *Tx) *pgx.QueuedQuery {
	if len(s.keys) == 0 {
		return nil
	}
	keys, deltas := s.Sorted()
	args := make([]any, 0, 1+len(deltas))
	args = append(args, keys)
	for _, d := range deltas {
		args = append(args, d)
	}
	s.Reset()
	return tx.Queue(s.sql, args...)
}

func (s *Sums[K]) queueOn(t *Tx) { s.Queue(t) }

// TxSums returns the Sums of tx for table, created by the first call with
// NewSums' arguments: changes added to it by any number of handler calls in
// the transaction — an EventHandler's Apply of each event — are written
// once, after the handler's last call (by the processor, or by Apply), in
// key order; the Sums of several tables are written in the order of their
// names. That is what keeps an EventHandler that updates shared rows free of
// deadlocks: its events would lock them in event order. Do not call Queue on
// it. It panics if the table's Sums has another key type.
func TxSums[K SumKey](tx *Tx, table pgx.Identifier, key string, columns ...string) *Sums[K] {
	name := table.Sanitize()
	if d, ok := tx.deferred[name]; ok {
		s, ok := d.(*Sums[K])
		if !ok {
			panic(fmt.Sprintf("projection: TxSums: %s has a key of type %T", name, d))
		}
		return s
	}
	s := NewSums[K](table, key, columns...)
	if tx.deferred == nil {
		tx.deferred = map[string]deferredSums{}
	}
	tx.deferred[name] = s
	return s
}

// Reset discards the accumulated changes.
func (s *Sums[K]) Reset() {
	clear(s.index)
	s.keys = s.keys[:0]
	s.vals = s.vals[:0]
}

// SQL returns the upsert Queue sends; its parameters are the key array and
// one bigint array per column.
func (s *Sums[K]) SQL() string { return s.sql }
