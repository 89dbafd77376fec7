// Package aggregate defines the event envelope inorder processes and the
// per-aggregate version rules it enforces.
//
// # Events
//
// An [Event] belongs to one aggregate (an entity with its own stream, such as
// a payment) and carries that aggregate's version: 1 for its first event, 2
// for the next, and so on, with no gaps. Its ID is derived from the fact, not
// from the delivery: by default "<aggregate>:<version>" (see [Event.StableID]),
// or an id the source already has, such as EventStoreDB's event UUID. The same
// fact delivered twice therefore has the same id, which is what lets inorder
// tell a redelivery from a conflicting event.
//
// # Validation
//
// [Event.Validate] checks an envelope against [Limits] and returns a
// [*ValidationError] that wraps one of the sentinel errors ([ErrEmptyAggregate],
// [ErrBadVersion], [ErrEmptyType], [ErrInvalidJSON], [ErrInvalidMetadata],
// [ErrPayloadTooLarge], [ErrUnknownType]), so callers can use errors.Is and
// errors.As. The processor keeps every rejected delivery with its reason for an
// operator to inspect and replay; nothing is dropped.
//
// # Versions
//
// [Classify] states the gate's rule: with an aggregate at version c, version
// c+1 is applied next, a later version is parked until its predecessors
// arrive, and an earlier one is stale (a duplicate, or a conflict if its id or
// payload differ from what was applied).
package aggregate
