package projection_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/pgtest"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/projection/projectiontest"
)

// hotRows is a projection unlike the ledger: cheap per event, one row per
// aggregate (hr_aggs) plus additive updates of a few hundred shared hot
// rows (hr_hot: counters, stock, balances), whose keys follow a skewed,
// Zipf-like distribution. It is the second workload of the benchmarks
// (BenchmarkHotRows) and a conformance subject with shared rows.
type hotRows struct {
	name string
	// inline keeps the gate's state in the aggregate's row.
	inline bool
	// unordered writes the hot rows with the natural UPDATE … FROM
	// unnest(…) in map order instead of projection.Sums: what deadlocks
	// concurrent writers.
	unordered bool
}

// hotEvent is a hotRows event's payload: an amount added to hot row K.
type hotEvent struct {
	K int64 `json:"k"`
	A int64 `json:"a"`
}

const hotType = "hot.added"

func (h *hotRows) Name() string { return h.name }

func (h *hotRows) InlineTable() (projection.InlineTable, bool) {
	if !h.inline {
		return projection.InlineTable{}, false
	}
	return hotAggs.Table, true
}

// hotAggs is the upsert of hotRows' row per aggregate: its total and count
// add up the events of each call, last is the last event's amount.
var hotAggs = projection.InlineUpsert{
	Table: projection.InlineTable{Table: pgx.Identifier{"hr_aggs"}, Key: "id", Version: "version", Log: "inorder_log"},
	Alias: "a",
	Columns: []projection.InlineColumn{
		{Name: "total", Type: "bigint", Update: "a.total + EXCLUDED.total"},
		{Name: "n", Type: "bigint", Update: "a.n + EXCLUDED.n"},
		{Name: "last", Type: "bigint"},
	},
}

func (h *hotRows) Setup(ctx context.Context, tx pgx.Tx) error {
	for _, s := range []string{
		`CREATE TABLE IF NOT EXISTS hr_aggs (id text PRIMARY KEY, version bigint NOT NULL, total bigint NOT NULL,
  n bigint NOT NULL, last bigint NOT NULL, inorder_log bytea NOT NULL DEFAULT '')`,
		`CREATE TABLE IF NOT EXISTS hr_hot (k bigint PRIMARY KEY, total bigint NOT NULL DEFAULT 0, n bigint NOT NULL DEFAULT 0)`,
		`INSERT INTO hr_hot (k) SELECT generate_series(0, ` + fmt.Sprint(hotKeys-1) + `) ON CONFLICT DO NOTHING`,
	} {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("hot rows: setup: %w", err)
		}
	}
	return nil
}

func (h *hotRows) Reset(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `TRUNCATE hr_aggs; UPDATE hr_hot SET total = 0, n = 0`); err != nil {
		return fmt.Errorf("hot rows: reset: %w", err)
	}
	return nil
}

func (h *hotRows) ApplyBatch(ctx context.Context, tx *projection.Tx, events []aggregate.Event) error {
	var ids []string
	var vers, totals, ns, lasts []int64
	hot := projection.NewSums[int64](pgx.Identifier{"hr_hot"}, "k", "total", "n")
	for i, e := range events {
		var d hotEvent
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return fmt.Errorf("hot rows: %s v%d: %w", e.Aggregate, e.Version, err)
		}
		if i == 0 || events[i-1].Aggregate != e.Aggregate {
			ids = append(ids, e.Aggregate)
			vers, totals, ns, lasts = append(vers, 0), append(totals, 0), append(ns, 0), append(lasts, 0)
		}
		j := len(ids) - 1
		vers[j], totals[j], ns[j], lasts[j] = e.Version, totals[j]+d.A, ns[j]+1, d.A
		hot.Add(d.K, d.A, 1)
	}
	if err := hotAggs.Queue(tx, ids, vers, totals, ns, lasts); err != nil {
		return fmt.Errorf("hot rows: %w", err)
	}
	if !h.unordered {
		hot.Queue(tx)
		return nil
	}
	// The natural statement: the keys in the order a map gives them.
	keys, deltas := hot.Sorted()
	rng := rand.New(rand.NewPCG(uint64(len(keys)), uint64(events[0].Version)))
	perm := rng.Perm(len(keys))
	ks, ts, cs := make([]int64, len(keys)), make([]int64, len(keys)), make([]int64, len(keys))
	for i, p := range perm {
		ks[i], ts[i], cs[i] = keys[p], deltas[0][p], deltas[1][p]
	}
	tx.Queue(`UPDATE hr_hot h SET total = h.total + u.t, n = h.n + u.c
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS u(k, t, c) WHERE h.k = u.k`, ks, ts, cs)
	return nil
}

func (h *hotRows) Describe() projection.Description {
	return projection.Description{Types: []string{hotType}}
}

// hotKeys is how many shared hot rows hotRows updates.
const hotKeys = 500

// hotZipf draws hot keys with a skewed distribution: key k with weight
// 1/(k+1)^1.1 (Zipf-like; the first rows take most updates).
type hotZipf struct{ cdf []float64 }

func newHotZipf() *hotZipf {
	z := &hotZipf{cdf: make([]float64, hotKeys)}
	var sum float64
	for k := range hotKeys {
		sum += 1 / math.Pow(float64(k+1), 1.1)
		z.cdf[k] = sum
	}
	for k := range z.cdf {
		z.cdf[k] /= sum
	}
	return z
}

func (z *hotZipf) draw(rng *rand.Rand) int64 {
	i, _ := slices.BinarySearch(z.cdf, rng.Float64())
	return int64(min(i, hotKeys-1))
}

// hotGenerate is hotRows' stream: aggregates × versions events, each
// aggregate's versions ascending, aggregates interleaved at random.
func hotGenerate(rng *rand.Rand, aggregates, versions int) []aggregate.Event {
	z := newHotZipf()
	next := make([]int, aggregates)
	open := make([]int, aggregates)
	for i := range open {
		open[i] = i
	}
	out := make([]aggregate.Event, 0, aggregates*versions)
	for len(open) > 0 {
		j := rng.IntN(len(open))
		a := open[j]
		next[a]++
		e, err := aggregate.New(fmt.Sprintf("agg-%06d", a), int64(next[a]), hotType, hotEvent{K: z.draw(rng), A: 1 + rng.Int64N(100)})
		if err != nil {
			panic(err)
		}
		out = append(out, e)
		if next[a] == versions {
			open[j] = open[len(open)-1]
			open = open[:len(open)-1]
		}
	}
	return out
}

// hotModel is hotRows' read model.
type hotModel struct {
	Aggs map[string][4]int64 // version, total, n, last
	Hot  map[int64][2]int64  // total, n
}

// hotFold is the in-order fold of the distinct events.
func hotFold(events []aggregate.Event) (*hotModel, error) {
	m := &hotModel{Aggs: map[string][4]int64{}, Hot: map[int64][2]int64{}}
	for k := range int64(hotKeys) {
		m.Hot[k] = [2]int64{}
	}
	es := slices.Clone(events)
	slices.SortStableFunc(es, func(a, b aggregate.Event) int {
		return cmp.Or(strings.Compare(a.Aggregate, b.Aggregate), cmp.Compare(a.Version, b.Version))
	})
	for _, e := range es {
		var d hotEvent
		if err := json.Unmarshal(e.Data, &d); err != nil {
			return nil, err
		}
		a := m.Aggs[e.Aggregate]
		if e.Version != a[0]+1 {
			return nil, fmt.Errorf("hot fold: %s at v%d given v%d", e.Aggregate, a[0], e.Version)
		}
		m.Aggs[e.Aggregate] = [4]int64{e.Version, a[1] + d.A, a[2] + 1, d.A}
		h := m.Hot[d.K]
		m.Hot[d.K] = [2]int64{h[0] + d.A, h[1] + 1}
	}
	return m, nil
}

// hotLoad reads hotRows' read model.
func hotLoad(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) (*hotModel, error) {
	m := &hotModel{Aggs: map[string][4]int64{}, Hot: map[int64][2]int64{}}
	rows, err := q.Query(ctx, `SELECT id, version, total, n, last FROM hr_aggs`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id string
		var a [4]int64
		if err := rows.Scan(&id, &a[0], &a[1], &a[2], &a[3]); err != nil {
			rows.Close()
			return nil, err
		}
		m.Aggs[id] = a
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = q.Query(ctx, `SELECT k, total, n FROM hr_hot`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var k int64
		var h [2]int64
		if err := rows.Scan(&k, &h[0], &h[1]); err != nil {
			rows.Close()
			return nil, err
		}
		m.Hot[k] = h
	}
	return m, rows.Err()
}

// hotSubject is the conformance subject of hotRows.
func hotSubject(inline, unordered bool) projectiontest.Subject {
	return projectiontest.Subject{
		Generate: hotGenerate,
		New: func(t *testing.T) *projectiontest.Case {
			db := pgtest.NewMigrated(t)
			return conformanceCase(t, db, func(t *testing.T, events []aggregate.Event) {
				t.Helper()
				want, err := hotFold(events)
				require.NoError(t, err)
				got, err := hotLoad(t.Context(), db.Pool)
				require.NoError(t, err)
				require.Equal(t, want, got)
			}, &hotRows{name: "hot", inline: inline, unordered: unordered})
		},
	}
}

// TestConformanceHotRows runs the conformance suite on a projection whose
// batches all update the same few hundred shared rows: with projection.Sums
// no sub-test deadlocks (PartitionedWorkers most of all).
func TestConformanceHotRows(t *testing.T) {
	t.Parallel()
	f := projectiontest.Features{Aggregates: 200, Versions: 6, MaxBatch: 200, Seeds: 2}
	t.Run("inline", func(t *testing.T) {
		t.Parallel()
		projectiontest.Run(t, hotSubject(true, false), f)
	})
}

// TestHotRowsUpsertPlan: hotRows' upsert, written by InlineUpsert, puts its
// columns in another order than the statements it replaced (the version
// after the read model's columns) and is planned as they were.
func TestHotRowsUpsertPlan(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { return (&hotRows{}).Setup(ctx, tx) }))
	it := hotAggs.Table
	const set = ` ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, total = a.total + EXCLUDED.total,
  n = a.n + EXCLUDED.n, last = EXCLUDED.last`
	// As hotrows_test.go wrote them by hand before InlineUpsert.
	inline := `INSERT INTO hr_aggs AS a (id, version, total, n, last, inorder_log)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bytea[])` + set + `, ` + it.SetLog("a") + `
WHERE ` + it.Condition("a")
	plain := `INSERT INTO hr_aggs AS a (id, version, total, n, last)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[])` + set
	explain := func(sql string, args ...any) string {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `EXPLAIN (COSTS OFF) `+sql, args...)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.NotEmpty(t, lines)
		return strings.Join(lines, "\n")
	}
	ids, one, log := []string{"x"}, []int64{1}, [][]byte{make([]byte, 8)}
	require.Equal(t, explain(inline, ids, one, one, one, one, log), explain(hotAggs.SQL(true), ids, one, one, one, one, log))
	require.Equal(t, explain(plain, ids, one, one, one, one), explain(hotAggs.SQL(false), ids, one, one, one, one))
}

// hotJittered is a hot-rows stream of seed (aggregates × hotBenchVersions),
// the same jittered for batches of batch (each delivery displaced by up to
// two batches, 5% copies), and the stream's in-order fold.
func hotJittered(t *testing.T, seed uint64, aggregates, batch int) (events, jittered []aggregate.Event, want *hotModel) {
	t.Helper()
	events = hotGenerate(rand.New(rand.NewPCG(seed, 1)), aggregates, hotBenchVersions)
	jittered = benchJitter(rand.New(rand.NewPCG(seed, 2)), events, 2*batch, 0.05)
	want, err := hotFold(events)
	require.NoError(t, err)
	return events, jittered, want
}
