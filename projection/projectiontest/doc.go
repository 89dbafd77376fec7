// Package projectiontest is the conformance suite of inorder's version gate:
// it feeds a projection shuffled, duplicated, reversed and concurrent
// deliveries through a [projection.Processor] and requires the read model to
// equal the in-order fold of the stream, each event applied exactly once.
//
// Every projection, and every source that feeds one, runs the same suite
// with [Run], the way Watermill's pub/sub implementations run
// pubsub/tests.TestPubSub:
//
//	func TestConformance(t *testing.T) {
//		projectiontest.Run(t, projectiontest.Subject{
//			Generate: ledger.Generate,
//			New: func(t *testing.T) *projectiontest.Case {
//				db := projectiontest.NewDB(t) // a fresh, migrated schema
//				l := ledger.New(nil)
//				proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema}, l)
//				require.NoError(t, err)
//				require.NoError(t, proc.Setup(t.Context()))
//				return &projectiontest.Case{
//					Processor: proc,
//					Check: func(t *testing.T, events []aggregate.Event) {
//						want, err := ledger.Fold(events)
//						require.NoError(t, err)
//						got, err := l.Load(t.Context(), db.Pool)
//						require.NoError(t, err)
//						require.Equal(t, want, got)
//					},
//				}
//			},
//		}, projectiontest.Features{})
//	}
//
// # What it checks
//
// Each sub-test delivers a stream and then checks, besides the subject's own
// [Case.Check]:
//
//   - no parked events are left for the processor's projections;
//   - every version row (table versions) is at its aggregate's last version,
//     with nothing parked and nothing blocked;
//   - no quarantined events, no conflicts, no rejected deliveries;
//   - the applied log holds one row per distinct event;
//   - the processor's [projection.Counts] are consistent: every distinct
//     event applied once (Counts.Applied), every parked delivery drained,
//     no conflict, quarantine, rejection or deadlock
//     ([projection.Counts].Deadlocks: every sub-test fails on one) — and, when deliveries go straight
//     to [projection.Processor.Process], one outcome per delivery and the
//     exact outcomes each schedule implies.
//
// The sub-tests are:
//
//   - RandomSchedules: per seed, a stream of Features.Aggregates ×
//     Features.Versions events with a share of exact-copy duplicates,
//     shuffled, cut into batches of random size and delivered by
//     Features.Workers concurrent workers;
//   - PartitionedWorkers: the stream in order, each aggregate delivered by
//     one of Features.Workers concurrent workers (a source partitioned by
//     aggregate), whose batches update the read model's shared rows at
//     once — what deadlocks a projection that writes them in different
//     orders;
//   - ReversedPerAggregate: every aggregate's versions delivered last to
//     first, in batches that mix aggregates;
//   - OneAggregateInParallel: every version of one aggregate, twice, each
//     delivery in its own goroutine;
//   - DuplicatesOfParked: versions 3…N delivered twice (and again) before
//     versions 2 and 1;
//   - ArrivalBetweenParkAndDrain: version 3 parked, then versions 2, 1, 4 and
//     a copy of 3 delivered at once from different goroutines, in random
//     groupings, many times;
//   - SameEventConcurrently: one event delivered by 2, 8 and 64 goroutines at
//     once has exactly one effect — version 1 (creating the aggregate's
//     version row), then 2, then 4 (parked once) and 3 (applied once,
//     draining 4).
//
// Sub-tests run in parallel; [Subject.New] is called once per sub-test and
// must return an isolated case (its own schema, say).
package projectiontest
