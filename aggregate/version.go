package aggregate

// Decision is what the gate does with an incoming version.
type Decision int

// The decisions of Classify.
const (
	// Stale: the version is at or below the current one. The event is a
	// duplicate, or a conflict if its id or payload differ from the applied
	// event's.
	Stale Decision = iota + 1
	// Next: the version is current+1 and is applied now.
	Next
	// Future: the version is beyond current+1 and is parked until its
	// predecessors have been applied.
	Future
)

// String returns "stale", "next" or "future".
func (d Decision) String() string {
	switch d {
	case Stale:
		return "stale"
	case Next:
		return "next"
	case Future:
		return "future"
	}
	return "unknown"
}

// Classify decides what happens to version v of an aggregate whose last
// applied version is current (0 before its first event).
func Classify(current, v int64) Decision {
	switch {
	case v <= current:
		return Stale
	case v == current+1:
		return Next
	default:
		return Future
	}
}
