package projection

import (
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the applied log: the id and payload hash of every applied
// version, which tell a redelivery (a duplicate) from a conflicting event.
//
// The log of an aggregate's recent versions lives in its version row (see
// migrations/sql/002_applied_in_versions.up.sql): a row's log covers
// versions log_base+1 … version, one entry per version, log_ids[k] the event
// id of version log_base+k (NULL for the default "<aggregate>:<version>")
// and bytes 16(k-1) … 16k-1 of log_hashes its 16-byte hash. The statements
// that write version rows append the entries of the runs they apply. Once a
// write has taken a row past the end of a page of logPage versions, the
// same transaction — which holds the row — moves the entries of the full
// pages into the applied table, one row per version, and trims them from
// the row (store.Applied.QueueSpill): a log holds the versions of
// the row's current page, at most logPage entries, between writes.
// Operator actions move the whole log and start an empty one at the new
// version, because they may skip versions, which a page cannot hold.

// logPage is the size of the pages of versions that a version row's applied
// log covers.
const logPage = store.LogPage

// pageStart returns the version after which the page of version v starts:
// the log_base a row at version v keeps once its full pages moved out.
func pageStart(v int64) int64 {
	if v <= 0 {
		return 0
	}
	return (v - 1) / logPage * logPage
}

// crossesPage reports whether a write that moves an aggregate from version
// from to version to fills a page, whose entries must then move to the
// applied table.
func crossesPage(from, to int64) bool {
	return to > from && pageStart(from) != pageStart(to)
}

// queueSpill queues the move of the full pages of the logs of the version
// rows of aggs, which the transaction holds, into the applied table.
func (p *Processor) queueSpill(b *pgx.Batch, projection string, aggs []string) {
	if len(aggs) == 0 {
		return
	}
	p.store.Applied.QueueSpill(b, projection, aggs)
}

// logEntries gathers, row by row, the applied-log entries that the version
// statements append to version rows: per row, the entry count, the ids as an
// array literal (nil when every id is the default "<aggregate>:<version>",
// which the log stores as NULL) and the 16-byte hashes concatenated. Call
// start before each row's entries and done after the last row.
type logEntries struct {
	n      []int32
	ids    []*string
	hashes [][]byte
	err    error // a hash that is not 16 bytes long

	buf     []byte // every row's hashes; hashes slices it in done
	starts  []int  // where each row's hashes start in buf
	lit     []byte // the current row's ids literal
	custom  bool   // the current row has an id that is not the default one
	entries int    // entries of the current row
}

// args returns the entries as the version statements take them.
func (l *logEntries) args() store.LogArgs { return store.LogArgs{N: l.n, IDs: l.ids, Hashes: l.hashes} }

// start begins a row.
func (l *logEntries) start() {
	l.finish()
	l.n, l.ids, l.starts = append(l.n, 0), append(l.ids, nil), append(l.starts, len(l.buf))
	l.lit, l.custom, l.entries = append(l.lit[:0], '{'), false, 0
}

// add appends the entry of an aggregate's version to the current row.
func (l *logEntries) add(agg string, version int64, id string, hash []byte) {
	if len(hash) != 16 && l.err == nil {
		// Every hash is aggregate.Event.Hash: 16 bytes. A log entry of
		// another size would shift every entry after it.
		l.err = fmt.Errorf("projection: %s version %d has a %d-byte hash, not 16", agg, version, len(hash))
	}
	if l.entries > 0 {
		l.lit = append(l.lit, ',')
	}
	if isDefaultID(id, agg, version) {
		l.lit = append(l.lit, "NULL"...)
	} else {
		l.custom = true
		l.lit = append(l.lit, '"')
		for i := 0; i < len(id); i++ {
			if id[i] == '"' || id[i] == '\\' {
				l.lit = append(l.lit, '\\')
			}
			l.lit = append(l.lit, id[i])
		}
		l.lit = append(l.lit, '"')
	}
	l.entries++
	l.buf = append(l.buf, hash...)
}

// finish closes the current row, if any.
func (l *logEntries) finish() {
	if len(l.n) == 0 {
		return
	}
	last := len(l.n) - 1
	l.n[last] = int32(l.entries)
	if l.custom {
		lit := string(append(l.lit, '}'))
		l.ids[last] = &lit
	}
	l.custom = false
}

// done closes the last row and slices the rows' hashes.
func (l *logEntries) done() {
	l.finish()
	l.hashes = make([][]byte, len(l.starts))
	for i, from := range l.starts {
		to := len(l.buf)
		if i+1 < len(l.starts) {
			to = l.starts[i+1]
		}
		l.hashes[i] = l.buf[from:to:to]
		if l.hashes[i] == nil {
			l.hashes[i] = []byte{} // an empty log, not NULL
		}
	}
}

// isDefaultID reports whether id is aggregate.DefaultID(agg, version)
// without building it (the gate asks for every delivery).
func isDefaultID(id, agg string, version int64) bool {
	n := len(agg)
	if len(id) < n+2 || id[:n] != agg || id[n] != ':' {
		return false
	}
	var digits [20]byte
	return id[n+1:] == string(strconv.AppendInt(digits[:0], version, 10))
}
