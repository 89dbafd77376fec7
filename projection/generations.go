package projection

import "github.com/jackc/pgx/v5"

// This file holds what the gate needs to know of generations: which gate
// key and which read-model schema a registration feeds.

// enterSchema queues, before r's handler runs, the statement that puts r's
// generation schema first on the transaction's search_path, so that the
// handler's unqualified table names reach that generation's tables. The
// search_path it replaces is kept in the transaction's
// inorder.search_path setting for leaveSchema. Generation 1 (r.schema
// empty) changes nothing.
func (r *registered) enterSchema(tx *Tx) {
	if r.schema == "" {
		return
	}
	tx.Queue(`SELECT set_config('search_path',
  CASE WHEN set_config('inorder.search_path', current_setting('search_path'), true) = '' THEN $1
       ELSE $1 || ', ' || current_setting('inorder.search_path') END, true)`, pgx.Identifier{r.schema}.Sanitize())
}

// leaveSchema queues the statement that restores the search_path
// enterSchema replaced, after r's handler and before the next projection's.
func (r *registered) leaveSchema(tx *Tx) {
	if r.schema == "" {
		return
	}
	tx.Queue(`SELECT set_config('search_path', current_setting('inorder.search_path'), true)`)
}
