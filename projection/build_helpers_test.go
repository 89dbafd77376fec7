package projection_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/httpapi"
	"github.com/inorder/inorder/internal/ledgertest"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
)

// This file holds the helpers of the side-by-side rebuild tests
// (build_test.go, build_live_test.go; prefixed gen).

// genStream is a projection.Stream over events appended to it while it is
// read, as an event store's log: position i (as text) is the i-th record,
// 1-based. Records for which skip returns true stand for events that are
// not for the projections.
type genStream struct {
	mu     sync.Mutex
	events []aggregate.Event
	skip   func(i int) bool
	chunk  int
	// reads counts the records read, readFrom the start of every Read.
	reads    atomic.Int64
	readFrom []int
	// onBatch, if set, is called before each batch is handed over.
	onBatch func(ctx context.Context, sb projection.StreamBatch) error
}

func newGenStream(events []aggregate.Event, chunk int) *genStream {
	return &genStream{events: slices.Clone(events), chunk: chunk}
}

func (s *genStream) Append(es ...aggregate.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, es...)
}

func (s *genStream) All() []aggregate.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

func genPos(i int) projection.Position { return projection.Position(fmt.Sprintf("%012d", i)) }

func (s *genStream) Read(ctx context.Context, from projection.Position, fn func(context.Context, projection.StreamBatch) error) error {
	start := 0
	if from != nil {
		n, err := strconv.Atoi(string(from))
		if err != nil {
			return err
		}
		start = n
	}
	s.mu.Lock()
	end := len(s.events)
	events := s.events[:end:end]
	s.readFrom = append(s.readFrom, start)
	s.mu.Unlock()
	for i := start; i < end; i += s.chunk {
		hi := min(i+s.chunk, end)
		sb := projection.StreamBatch{Read: int64(hi - i), Position: genPos(hi), Time: time.Now()}
		for k := i; k < hi; k++ {
			if s.skip == nil || !s.skip(k) {
				sb.Events = append(sb.Events, events[k])
			}
		}
		if s.onBatch != nil {
			if err := s.onBatch(ctx, sb); err != nil {
				return err
			}
		}
		if err := fn(ctx, sb); err != nil {
			return err
		}
		s.reads.Add(sb.Read)
	}
	return ctx.Err()
}

// genBundle is a migrated schema with the ledger at generation 1.
type genBundle struct {
	db     *pgtest.DB
	ledger *ledger.Projection
	proc   *projection.Processor
}

func genSetup(t *testing.T, ps ...projection.Projection) *genBundle {
	t.Helper()
	return genSetupLedger(t, ledger.New(nil), ps...)
}

// genSetupRows is genSetup with a ledger that keeps version rows (not
// inline).
func genSetupRows(t *testing.T) *genBundle {
	t.Helper()
	return genSetupLedger(t, ledger.New(&ledger.Options{VersionRows: true}))
}

func genSetupLedger(t *testing.T, l *ledger.Projection, ps ...projection.Projection) *genBundle {
	t.Helper()
	db := pgtest.NewMigrated(t)
	genCleanup(t, db)
	b := &genBundle{db: db, ledger: l}
	if len(ps) == 0 {
		ps = []projection.Projection{b.ledger}
	}
	b.proc = genProcessor(t, db, ps...)
	require.NoError(t, b.proc.Setup(t.Context()))
	return b
}

// genCleanup drops the generations' schemas of db's schema when the test
// ends (before pgtest drops db's).
func genCleanup(t testing.TB, db *pgtest.DB) {
	t.Cleanup(func() { db.DropGenerationSchemas(t) })
}

func genProcessor(t *testing.T, db *pgtest.DB, ps ...projection.Projection) *projection.Processor {
	t.Helper()
	proc, err := projection.New(db.Pool, &projection.Config{Schema: db.Schema, MaxAttempts: 2, RetryBackoff: time.Millisecond}, ps...)
	require.NoError(t, err)
	return proc
}

// genModel loads the ledger of generation gen: its schema first on the
// search_path ("" for generation 1).
func genModel(t *testing.T, b *genBundle, schema string) *ledger.Model {
	t.Helper()
	return ledgertest.LoadIn(t, b.db, b.ledger, schema)
}

func genFold(t *testing.T, events []aggregate.Event) *ledger.Model {
	t.Helper()
	m, err := ledger.Fold(events)
	require.NoError(t, err)
	return m
}

// genLive returns the live generation of the ledger.
func genLive(t *testing.T, proc *projection.Processor) projection.Generation {
	t.Helper()
	gens, err := proc.Generations(t.Context(), "ledger")
	require.NoError(t, err)
	for _, g := range gens {
		if g.State == projection.StateLive {
			return g
		}
	}
	t.Fatal("no live generation")
	return projection.Generation{}
}

func genStates(t *testing.T, proc *projection.Processor) map[int]string {
	t.Helper()
	gens, err := proc.Generations(t.Context(), "ledger")
	require.NoError(t, err)
	out := map[int]string{}
	for _, g := range gens {
		out[g.Generation] = g.State
	}
	return out
}

// genReaders are three readers of the ledger through the HTTP API of a
// processor of their own on b's schema, each checking every read against
// the in-order folds of the events (ledgertest.Folds.ReadAny) until stop.
type genReaders struct {
	// reads counts the whole reads, afterSwitch those since switched was
	// set (the test sets it at the switch).
	reads, afterSwitch atomic.Int64
	switched           atomic.Bool
	done               chan struct{}
	g                  *errgroup.Group
}

// startGenReaders starts the readers, reader r's picks drawn from
// rand.NewPCG(seed, base+r).
func startGenReaders(ctx context.Context, t *testing.T, b *genBundle, events []aggregate.Event, seed, base uint64) *genReaders {
	t.Helper()
	var folds ledgertest.Folds
	require.NoError(t, folds.Add(events))
	srv := httptest.NewServer(httpapi.New(genProcessor(t, b.db, ledger.New(nil)), nil))
	t.Cleanup(srv.Close)
	r := &genReaders{done: make(chan struct{})}
	g, rctx := errgroup.WithContext(ctx)
	r.g = g
	for i := range 3 {
		g.Go(func() error {
			rng := rand.New(rand.NewPCG(seed, base+uint64(i)))
			seen := map[string]int64{}
			for {
				select {
				case <-r.done:
					return nil
				default:
				}
				ok, err := folds.ReadAny(rctx, http.DefaultClient, srv.URL, rng, seen)
				if err != nil {
					return err
				}
				if ok {
					r.reads.Add(1)
					if r.switched.Load() {
						r.afterSwitch.Add(1)
					}
				}
			}
		})
	}
	return r
}

// stop lets the readers read the final state a while (200 more reads
// after the switch), stops them and returns the first error of a read.
func (r *genReaders) stop() error {
	for before := r.afterSwitch.Load(); r.afterSwitch.Load() < before+200; {
		time.Sleep(time.Millisecond)
	}
	close(r.done)
	return r.g.Wait()
}

// genRequireBothFolds requires that generation 2 is live, that it and the
// previous generation, fed too, both hold the in-order fold of events, and
// that the ledger's status is clean: events applied, nothing parked,
// quarantined or in conflict.
func genRequireBothFolds(t *testing.T, b *genBundle, events []aggregate.Event) {
	t.Helper()
	live := genLive(t, b.proc)
	require.Equal(t, 2, live.Generation)
	want := genFold(t, events)
	require.Equal(t, want, genModel(t, b, live.Schema))
	require.Equal(t, want, genModel(t, b, ""), "the previous generation is fed too")
	st := opStatus(t, b.proc, "ledger")
	require.Zero(t, st.Parked)
	require.Zero(t, st.Quarantined)
	require.Zero(t, st.Conflicts)
	require.EqualValues(t, len(events), st.Events)
}
