package ledger

import (
	"sort"

	"github.com/inorder/inorder/aggregate"
)

// Model is the whole read model, comparable with testify's Equal.
type Model struct {
	Payments map[string]Payment
	Legs     []Leg            // sorted by payment, version, leg
	Balances map[string]int64 // accounts with a non-zero balance
}

// Fold applies events — the whole stream, in any order: it is sorted per
// payment by version first — once each, and returns the read model the
// projection must produce. Duplicate versions are an error.
func Fold(events []aggregate.Event) (*Model, error) {
	byAgg := map[string][]aggregate.Event{}
	for _, e := range events {
		byAgg[e.Aggregate] = append(byAgg[e.Aggregate], e)
	}
	m := &Model{Payments: map[string]Payment{}, Balances: map[string]int64{}}
	for agg, es := range byAgg {
		sort.Slice(es, func(i, j int) bool { return es[i].Version < es[j].Version })
		var p *Payment
		for _, e := range es {
			next, legs, err := Step(p, e)
			if err != nil {
				return nil, err
			}
			p = next
			for _, l := range legs {
				m.Legs = append(m.Legs, l)
				m.Balances[l.Account] += l.Amount
			}
		}
		m.Payments[agg] = *p
	}
	m.normalize()
	return m, nil
}

func (m *Model) normalize() {
	sort.Slice(m.Legs, func(i, j int) bool {
		a, b := m.Legs[i], m.Legs[j]
		if a.Payment != b.Payment {
			return a.Payment < b.Payment
		}
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		return a.Leg < b.Leg
	})
	for k, v := range m.Balances {
		if v == 0 {
			delete(m.Balances, k)
		}
	}
	if m.Legs == nil {
		m.Legs = []Leg{}
	}
}
