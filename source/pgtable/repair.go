package pgtable

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// DefaultRepairLimit is how many aggregates RepairNow repairs by default.
const DefaultRepairLimit = 100

// RepairNow reads, for every aggregate waiting for versions in the
// processor's projections (opts narrows them), the missing versions from
// the table and processes them; the versions the table does not have are
// recorded once in the operator log ('gap-missing-at-source') for an
// operator to decide ('parked declare-gap'). Rows of transactions still
// running are not read. It needs no Run.
//
// In inorder's own table a stream has no holes (Append refuses them), so
// aggregates wait only until the reader comes to their missing rows; in a
// mapped table versions may be missing for good.
func (s *Source) RepairNow(ctx context.Context, opts *source.RepairOptions) ([]source.Repair, error) {
	if opts == nil {
		opts = &source.RepairOptions{}
	}
	if opts.Limit < 0 || opts.OlderThan < 0 {
		return nil, errors.New("pgtable: negative RepairOptions.Limit or OlderThan")
	}
	proc := s.cfg.Processor
	limit := cmp.Or(opts.Limit, DefaultRepairLimit)
	waiting, err := proc.Waiting(ctx, projection.ListOptions{Projection: opts.Projection, Aggregate: opts.Aggregate, OlderThan: opts.OlderThan,
		Generation: opts.Generation, Limit: limit * max(len(proc.Projections()), 1)})
	if err != nil {
		return nil, fmt.Errorf("pgtable: repair: %w", err)
	}
	type gap struct {
		from, to int64
		waits    []projection.WaitingEntry
	}
	var order []string
	gaps := map[string]*gap{}
	for _, w := range waiting {
		g := gaps[w.Aggregate]
		if g == nil {
			if len(order) == limit {
				continue
			}
			g = &gap{from: w.MissingFrom, to: w.MissingTo}
			gaps[w.Aggregate] = g
			order = append(order, w.Aggregate)
		}
		g.from, g.to = min(g.from, w.MissingFrom), max(g.to, w.MissingTo)
		g.waits = append(g.waits, w)
	}
	out := make([]source.Repair, 0, len(order))
	for _, agg := range order {
		g := gaps[agg]
		r := source.Repair{Aggregate: agg, From: g.from, To: g.to}
		res, err := s.pool.Query(ctx, s.cfg.byAggSQL, agg, g.from, g.to)
		if err != nil {
			return out, fmt.Errorf("pgtable: repair %s: %w", agg, err)
		}
		rows, err := scanRows(res, nil)
		if err != nil {
			return out, fmt.Errorf("pgtable: repair %s: %w", agg, err)
		}
		have := map[int64]bool{}
		events := make([]aggregate.Event, 0, len(rows))
		for _, rw := range rows {
			if !have[rw.ev.Version] { // the first row of a version, in read order
				events = append(events, rw.ev)
			}
			have[rw.ev.Version] = true
		}
		r.Found = len(have)
		if len(events) > 0 {
			results, err := proc.Process(ctx, projection.Batch{Events: events, Source: s.cfg.Name, DryRun: opts.DryRun})
			if err != nil {
				return out, fmt.Errorf("pgtable: repair %s: %w", agg, err)
			}
			r.Outcomes = map[string]int{}
			for _, res := range results {
				r.Outcomes[res.Outcome.String()]++
			}
		}
		for v := g.from; v <= g.to; v++ {
			if have[v] {
				continue
			}
			to := v
			for to < g.to && !have[to+1] {
				to++
			}
			r.Missing = append(r.Missing, rangeString(v, to))
			for _, w := range g.waits {
				if !opts.DryRun && w.MissingFrom <= v && v <= w.MissingTo {
					from, upto := v, min(to, w.MissingTo)
					if _, err := proc.LogAction(ctx, projection.Action{Action: "gap-missing-at-source", Projection: w.Projection, Aggregate: agg,
						From: &from, To: &upto, Reason: "not in " + s.cfg.table, Once: true}); err != nil {
						return out, fmt.Errorf("pgtable: repair %s: %w", agg, err)
					}
				}
			}
			v = to
		}
		if len(rows) == 0 {
			r.Reason = "no row of these versions in " + s.cfg.table
		}
		out = append(out, r)
	}
	return out, nil
}

func rangeString(from, to int64) string {
	if from == to {
		return strconv.FormatInt(from, 10)
	}
	return strconv.FormatInt(from, 10) + "-" + strconv.FormatInt(to, 10)
}
