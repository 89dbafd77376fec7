package sourcetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// eventType is the type of the suite's events.
const eventType = "sourcetest.noted"

// foldProjection records, per aggregate, every version it applies in the
// order it applies them, a digest of each one's data, and the worker that
// applied it: a second application, a version out of order or a payload
// changed on the way all show.
type foldProjection struct {
	worker string
	// fail, if set, is asked before each event is applied; its error fails
	// the handler.
	fail func(aggregate.Event) error
}

func (f *foldProjection) Name() string { return "sourcetest" }

func (f *foldProjection) Setup(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS sourcetest_fold (
	aggregate  text PRIMARY KEY,
	versions   bigint[] NOT NULL,
	sums       text[] NOT NULL,
	applied_by text[] NOT NULL
)`)
	return err
}

func (f *foldProjection) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE sourcetest_fold`)
	return err
}

func (f *foldProjection) Apply(ctx context.Context, tx *projection.Tx, e aggregate.Event) error {
	if f.fail != nil {
		if err := f.fail(e); err != nil {
			return err
		}
	}
	tx.Queue(`INSERT INTO sourcetest_fold AS f (aggregate, versions, sums, applied_by)
VALUES ($1, ARRAY[$2::bigint], ARRAY[$3::text], ARRAY[$4::text])
ON CONFLICT (aggregate) DO UPDATE SET versions = f.versions || EXCLUDED.versions,
	sums = f.sums || EXCLUDED.sums, applied_by = f.applied_by || EXCLUDED.applied_by`,
		e.Aggregate, e.Version, digest(e.Data), f.worker)
	return nil
}

// digest is a short digest of an event's data.
func digest(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:6])
}

// newProcessor returns a processor of the fold projection on pool's schema,
// set up.
func newProcessor(ctx context.Context, pool *pgxpool.Pool, schema string, f *foldProjection, cfg projection.Config) (*projection.Processor, error) {
	cfg.Schema = schema
	p, err := projection.New(pool, &cfg, f)
	if err != nil {
		return nil, err
	}
	if err := p.Setup(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// row is one aggregate of the read model.
type row struct {
	Versions  []int64
	Sums      []string
	AppliedBy []string
}

func loadFold(ctx context.Context, q *pgxpool.Pool) (map[string]row, error) {
	rows, err := q.Query(ctx, `SELECT aggregate, versions, sums, applied_by FROM sourcetest_fold`)
	if err != nil {
		return nil, err
	}
	out := map[string]row{}
	for rows.Next() {
		var agg string
		var r row
		if err := rows.Scan(&agg, &r.Versions, &r.Sums, &r.AppliedBy); err != nil {
			return nil, err
		}
		out[agg] = r
	}
	return out, rows.Err()
}

// appliedCount returns how many versions the read model holds, over every
// aggregate.
func appliedCount(ctx context.Context, q *pgxpool.Pool) (int, error) {
	var n int
	err := q.QueryRow(ctx, `SELECT coalesce(sum(cardinality(versions)), 0) FROM sourcetest_fold`).Scan(&n)
	return n, err
}

// checkFold requires the read model to be exactly the in-order fold of want
// (distinct valid messages): each aggregate's versions 1…n once, in order,
// with the data published.
func checkFold(t testing.TB, pool *pgxpool.Pool, want []Message) map[string]row {
	t.Helper()
	got, err := loadFold(t.Context(), pool)
	if err != nil {
		t.Fatalf("sourcetest: read the fold: %v", err)
	}
	exp := expected(want)
	var problems []string
	for _, agg := range slices.Sorted(maps.Keys(exp)) {
		w, g := exp[agg], got[agg]
		if !slices.Equal(w.Versions, g.Versions) {
			problems = append(problems, fmt.Sprintf("%s: versions applied %v, want %v", agg, g.Versions, w.Versions))
		} else if !slices.Equal(w.Sums, g.Sums) {
			problems = append(problems, fmt.Sprintf("%s: data %v, want %v", agg, g.Sums, w.Sums))
		}
	}
	for agg, g := range got {
		if _, ok := exp[agg]; !ok {
			problems = append(problems, fmt.Sprintf("%s: not published, applied %v", agg, g.Versions))
		}
	}
	if len(problems) > 0 {
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("… and %d more", len(problems)-10))
		}
		t.Fatalf("sourcetest: the read model is not the in-order fold of the %d events published:\n%s", total(exp), strings.Join(problems, "\n"))
	}
	return got
}

func expected(msgs []Message) map[string]row {
	exp := map[string]row{}
	seen := map[string]bool{}
	for _, m := range msgs {
		k := aggregate.DefaultID(m.Aggregate, m.Version)
		if seen[k] {
			continue
		}
		seen[k] = true
		r := exp[m.Aggregate]
		r.Versions = append(r.Versions, m.Version)
		r.Sums = append(r.Sums, digest(m.Data))
		exp[m.Aggregate] = r
	}
	for agg, r := range exp {
		// Published in version order per aggregate (stream order).
		for i, v := range r.Versions {
			if v != int64(i+1) {
				panic(fmt.Sprintf("sourcetest: %s published out of order: %v", agg, r.Versions))
			}
		}
	}
	return exp
}

func total(exp map[string]row) int {
	n := 0
	for _, r := range exp {
		n += len(r.Versions)
	}
	return n
}

// stream returns a stream of aggregates × versions events, each aggregate's
// versions in order, the aggregates interleaved at random, aggregate ids
// starting with prefix; from is the first version.
func stream(rng *rand.Rand, prefix string, aggregates, from, versions int) []Message {
	next := make([]int, aggregates)
	for i := range next {
		next[i] = from
	}
	var out []Message
	left := aggregates
	live := make([]int, aggregates)
	for i := range live {
		live[i] = i
	}
	for left > 0 {
		k := rng.IntN(left)
		a := live[k]
		out = append(out, message(fmt.Sprintf("%s%03d", prefix, a), int64(next[a]), rng))
		next[a]++
		if next[a] >= from+versions {
			live[k] = live[left-1]
			left--
		}
	}
	return out
}

func message(agg string, version int64, rng *rand.Rand) Message {
	return Message{Aggregate: agg, Version: version, Type: eventType,
		Data: fmt.Appendf(nil, `{"aggregate":%q,"version":%d,"note":"%016x"}`, agg, version, rng.Uint64())}
}

// withCopies returns msgs with a share of them published again later:
// exact copies, as a producer that retries sends.
func withCopies(rng *rand.Rand, msgs []Message, share float64) []Message {
	later := map[int][]Message{} // copies to publish after the message at that index
	for i, m := range msgs {
		if rng.Float64() < share {
			at := i + rng.IntN(len(msgs)-i)
			later[at] = append(later[at], m)
		}
	}
	out := make([]Message, 0, len(msgs)+len(later))
	for i, m := range msgs {
		out = append(out, m)
		out = append(out, later[i]...)
	}
	return out
}
