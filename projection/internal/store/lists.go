package store

import "fmt"

// This file holds what the operator listings' statements share.

// Page is where an operator listing starts and how long it is.
type Page struct {
	// Aggregate, when set, restricts the listing to one aggregate.
	Aggregate string
	// Limit caps the rows returned.
	Limit int
	// AfterID lists only rows with a larger id (listings by id).
	AfterID int64
	// After lists only aggregates whose id sorts after it in byte order
	// (listings by aggregate).
	After string
	// Open leaves acknowledged conflicts and resolved rejected deliveries
	// out.
	Open bool
	// OmitPayloads reads events' data and metadata as NULL.
	OmitPayloads bool
}

// Keys selects gate keys: Include lists the keys listed (empty: every key
// but Exclude), Exclude the keys left out. Neither may be nil.
type Keys struct {
	Include, Exclude []string
}

// KeyCondition is the condition on a gate table's projection column of a
// Keys whose Include and Exclude are the parameters $in and $ex.
func KeyCondition(in, ex int) string {
	return fmt.Sprintf("(cardinality($%d::text[]) = 0 OR projection = ANY($%d)) AND NOT (projection = ANY($%d::text[]))", in, in, ex)
}

// payloads returns the statement sql(columns) for a listing with and
// without payloads: [0] with the data and metadata columns, [1] with NULLs
// in their place.
func payloads(sql func(columns string) string) [2]string {
	return [2]string{sql("data, metadata"), sql("NULL::bytea, NULL::bytea")}
}

// pick returns the variant of a payloads statement for p.
func pick(s [2]string, p Page) string {
	if p.OmitPayloads {
		return s[1]
	}
	return s[0]
}
