package projection

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/projection/internal/generation"
)

// This file holds the names of generations (generations.go): the gate key
// and the read-model schema of generation n of a projection, and the
// queueing of the search_path statements (internal/generation's) that
// point a handler's unqualified table names at its generation's schema.

// checkKeys refuses projection names that are another projection's gate
// key of a later generation ("ledger@2" beside "ledger").
func checkKeys(byName map[string]*registered) error {
	for name := range byName {
		at := strings.LastIndexByte(name, '@')
		if at <= 0 {
			continue
		}
		if _, err := strconv.Atoi(name[at+1:]); err == nil && byName[name[:at]] != nil {
			return fmt.Errorf("projection: the name %q is the key of a generation of projection %q", name, name[:at])
		}
	}
	return nil
}

// generationKey returns the gate key of generation n of a projection:
// the name itself for generation 1 — so that a projection's gate rows from
// before generations stay its first generation's — and "<name>@<n>" after.
// New refuses a projection whose name is another's key.
func generationKey(name string, n int) string {
	if n == 1 {
		return name
	}
	return fmt.Sprintf("%s@%d", name, n)
}

// keyGeneration returns the generation number of a projection's gate key
// (see generationKey): 1 for the name itself, n for "<name>@<n>", 0 for a
// key that is not one of the projection's.
func keyGeneration(name, key string) int {
	if key == name {
		return 1
	}
	s, ok := strings.CutPrefix(key, name+"@")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 2 {
		return 0
	}
	return n
}

// generationSchema returns the read-model schema of generation n (> 1) of
// a projection, for inorder's tables in schema: "<schema>_<name>_g<n>",
// the name reduced to lower-case letters, digits and underscores (and a
// hash of it when that changed it), cut to PostgreSQL's 63 bytes.
func generationSchema(schema, name string, n int) string {
	clean := strings.Map(func(c rune) rune {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_':
			return c
		case c >= 'A' && c <= 'Z':
			return c + 'a' - 'A'
		}
		return '_'
	}, name)
	if clean != name {
		clean = fmt.Sprintf("%s_%08x", clean, uint32(advisoryKey64(name)))
	}
	suffix := fmt.Sprintf("_g%d", n)
	s := schema + "_" + clean
	if len(s)+len(suffix) > 63 {
		s = fmt.Sprintf("%s_%016x", s[:max(63-len(suffix)-17, 0)], uint64(advisoryKey64(schema+"\x00"+name)))
	}
	return s + suffix
}

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
	tx.Queue(generation.EnterSchemaSQL, pgx.Identifier{r.schema}.Sanitize())
}

// leaveSchema queues the statement that restores the search_path
// enterSchema replaced, after r's handler and before the next projection's.
func (r *registered) leaveSchema(tx *Tx) {
	if r.schema == "" {
		return
	}
	tx.Queue(generation.LeaveSchemaSQL)
}
