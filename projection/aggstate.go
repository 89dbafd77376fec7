package projection

import "github.com/jackc/pgx/v5"

// This file holds what the gate knows of an aggregate's version row, as
// read, locked or assumed, and whether a batch's runs all continue where
// their rows stand.

// aggState is an aggregate's version row.
type aggState struct {
	version int64
	parked  int32
	blocked bool
	rev     int64
}

// scanStates reads rows of (aggregate, version, parked, blocked, rev) into
// states.
func scanStates(rows pgx.Rows, into map[string]aggState) error {
	var agg string
	var st aggState
	for rows.Next() {
		if err := rows.Scan(&agg, &st.version, &st.parked, &st.blocked, &st.rev); err != nil {
			return err
		}
		into[agg] = st
	}
	return rows.Err()
}

// continues reports whether every run starts right after its aggregate's
// version in every projection, with nothing parked or quarantined.
func continues(runs []run, states []map[string]aggState) bool {
	for _, st := range states {
		for _, ru := range runs {
			s, ok := st[ru.agg]
			if ok && (s.version != ru.first-1 || s.parked != 0 || s.blocked) || !ok && ru.first != 1 {
				return false
			}
		}
	}
	return true
}
