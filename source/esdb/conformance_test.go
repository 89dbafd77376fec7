package esdb_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection/projectiontest"
	"github.com/inorder/inorder/source/esdb"
)

// The conformance suite of the version gate, fed through EventStoreDB: each
// delivery is appended to its aggregate's stream — in whatever order and as
// often as the suite delivers it, so the version comes from the metadata —
// and Deliver returns once the catch-up source has checkpointed past it.
func TestConformance(t *testing.T) {
	t.Parallel()
	ns := uuid.MustParse("0b8d3c2e-6f4a-4f7e-9a51-6c3d2b1a0f9e")
	projectiontest.Run(t, projectiontest.Subject{
		Generate: ledger.Generate,
		New: func(t *testing.T) *projectiontest.Case {
			e := newEnv(t)
			b := setup(t)
			r := start(t, esdb.Config{
				URL: e.url, Processor: b.Proc, Name: "conformance", MaxWait: 2 * time.Millisecond,
				CheckpointEvery: 5 * time.Millisecond, RepairAfter: -1,
				Mapping: esdb.Mapping{StreamPrefix: e.prefix, VersionField: "version"},
			})
			return &projectiontest.Case{
				Processor: b.Proc,
				Deliver: func(ctx context.Context, events []aggregate.Event) error {
					var last esdbc.Position
					for _, ev := range events {
						res, err := e.client.AppendToStream(ctx, e.stream(ev.Aggregate), esdbc.AppendToStreamOptions{}, esdbc.EventData{
							// The same fact has the same id: a copy is a duplicate.
							EventID:     uuid.NewSHA1(ns, []byte(ev.StableID())),
							EventType:   ev.Type,
							ContentType: esdbc.ContentTypeJson,
							Data:        ev.Data,
							Metadata:    fmt.Appendf(nil, `{"version":%d}`, ev.Version),
						})
						if err != nil {
							return err
						}
						if p := (esdbc.Position{Commit: res.CommitPosition, Prepare: res.PreparePosition}); posLess(last, p) {
							last = p
						}
					}
					return r.waitCheckpoint(ctx, last)
				},
				Check: func(t *testing.T, events []aggregate.Event) {
					b.RequireFold(t, events)
					require.Zero(t, r.src.Stats().Rejected)
				},
			}
		},
	}, projectiontest.Features{Seeds: 2, Aggregates: 40, Versions: 6, MaxBatch: 40})
}
