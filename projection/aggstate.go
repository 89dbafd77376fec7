package projection

import "github.com/jackc/pgx/v5"

// This file holds what the gate knows of an aggregate's version row, as
// read, locked or assumed.

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
