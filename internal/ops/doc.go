// Package ops is the one implementation of the operator actions that the
// HTTP API's write routes and the console share: each action on one item or
// on everything matching a filter, previewed first (a dry run that says what
// it would touch: how many, and the first rows) and carried out only on an
// explicit confirmation, bounded to what the preview matched.
//
// Its files, from the ground up: ops.go has the actions, the request and
// result types and the Engine; perform.go carries one action out through
// the processor or the effects client; single.go previews and runs a
// single action, bulk.go a bulk one (matching first, bounded by the
// preview), repair.go the repair of parked aggregates from the source;
// do.go is the entry point that checks a request and sends it on.
package ops
