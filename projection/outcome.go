package projection

// Outcome is what the processor did with one delivery for one projection.
// Every outcome is durable when Process returns without error, so the
// delivery may be acknowledged to its source.
type Outcome uint8

// The outcomes. The zero value is not a valid outcome.
const (
	// Applied: the event was the aggregate's next version and was applied.
	Applied Outcome = iota + 1
	// Parked: a future version, stored until its predecessors arrive.
	Parked
	// Duplicate: a redelivery of an applied, parked or in-batch event (same
	// id and payload); nothing changed.
	Duplicate
	// Conflict: the aggregate's version was already taken by an event with a
	// different id or payload; the delivery was recorded in the conflicts
	// table and not applied.
	Conflict
	// Quarantined: the handler failed on this event for good, or the event is
	// a redelivery of the quarantined one. It waits for an operator.
	Quarantined
	// Rejected: the envelope is invalid; it was recorded in the rejected table
	// with its reason.
	Rejected
)

var outcomeNames = [...]string{"", "applied", "parked", "duplicate", "conflict", "quarantined", "rejected"}

// String returns the outcome's lower-case name, as used in metrics and JSON.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && o != 0 {
		return outcomeNames[o]
	}
	return "unknown"
}

// Outcomes lists every outcome, in order.
var Outcomes = []Outcome{Applied, Parked, Duplicate, Conflict, Quarantined, Rejected}

// severity orders outcomes for Result.Outcome: the most noteworthy wins.
func (o Outcome) severity() int {
	switch o {
	case Rejected:
		return 6
	case Conflict:
		return 5
	case Quarantined:
		return 4
	case Parked:
		return 3
	case Applied:
		return 2
	case Duplicate:
		return 1
	}
	return 0
}

// Result is the outcome of one delivery.
type Result struct {
	// Outcome summarises Projections: the most noteworthy of them, in the
	// order Rejected, Conflict, Quarantined, Parked, Applied, Duplicate.
	Outcome Outcome
	// Projections holds the outcome for each projection, in the order of
	// Processor.Projections.
	Projections []Outcome
	// Err is the *aggregate.ValidationError of a Rejected delivery.
	Err error
}
