// Package generation owns the rebuild of a projection: the making of its
// generations and the moves between them.
//
// It holds:
//
//   - Build, a side-by-side rebuild (build.go): the build lock (lock.go),
//     the new generation created or resumed, the replay of the stream into
//     it in bulk (replay.go) and its finalization into gate state
//     (finalize.go), the catch-up through the gate, the hold for an
//     operator's switch (hold.go), verification and the switch
//     (switch.go), and its progress reports (progress.go);
//   - InPlace, the in-place mode (inplace.go): the live generation emptied
//     and replayed under the projection's rebuild lock;
//   - the operator actions on generations: RequestSwitch, Rollback and
//     Drop (hold.go, drop.go);
//   - how a projection's statements reach a generation's read-model schema
//     (schema.go).
//
// It reaches the batch gate only through its public path, the seam in
// gate.go: package projection describes the projection (Projection) and
// implements Gate over its Processor — the gate of one generation, the one
// a worker feeds, the projection's handler inside the replay's transaction
// (Target.Apply), its Tables and Verify. Every statement on inorder's
// tables goes through package store, and on the parked table through
// package buffer; the SQL here is on the rebuilt generation's own schema
// (the replay's journal and position, the content comparison).
//
// Package projection holds the public API (Processor.Build, BuildOptions,
// BuildProgress, BuildResult, VerificationError, Switch, Rollback,
// DropGeneration, the states and phases) and converts to and from this
// package's types; it holds too the generations as the gate sees them —
// which a processor feeds, the epoch check, the live generation of reads
// and operator actions — which the live batch's path looks up once. This
// package does not import projection.
package generation
