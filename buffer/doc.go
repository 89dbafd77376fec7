// Package buffer is inorder's parked table: durable storage for events that
// arrived before their predecessors.
//
// When version 5 of an aggregate arrives while the projection is at version 3,
// the processor parks it with [Buffer.QueuePark]. Parking is idempotent: the
// table is unique on (projection, aggregate, version), so a redelivered event
// is parked once. After the processor applies version 4 it loads the
// aggregate's parked events ([Buffer.QueueLoad]), applies the contiguous run
// that now follows and deletes it ([Buffer.QueueDelete]) — all in the transaction that holds the aggregate's
// version lock, so parking and draining never race.
//
// Every method adds its statement to the caller's [pgx.Batch], so the
// processor sends it in one round trip with its other work, in its
// transaction; a read hands its rows to a callback when the batch is sent.
// [Buffer.QueueList], [Buffer.QueueWaiting] and [Buffer.QueueStats] are for
// operators: what waits and for how long (package projection, which owns the
// versions table, adds the version each aggregate is at, in the same
// snapshot); [Buffer.QueueUnmatched] compares two generations' parked events
// before a switch, and [Buffer.QueueClear] empties a generation's. The parked table is this package's alone: every statement on it
// is here.
package buffer
