package projectiontest

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// This file holds the checks that end every case of the suite (verify) and
// RequireSettled, which tests of sources and projections call too.

// verify checks the read model, the gate's tables and the processor's
// counts after events were delivered (deliveries times in all, counting
// duplicates).
func verify(t *testing.T, c *tcase, events []aggregate.Event, deliveries int) {
	t.Helper()
	c.Check(t, events)
	// A source may give events ids of its own (Case.Deliver).
	requireSettled(t, c.Processor, events, c.Deliver != nil)

	distinct := int64(len(events))
	counts := c.Processor.Counts()
	for _, name := range c.Processor.Projections() {
		n := counts[name]
		d := n.Deliveries
		require.Equal(t, distinct, n.Applied(), "%s: Counts.Applied, every event once: %+v", name, n)
		require.Equal(t, distinct, d[projection.Applied]+d[projection.Parked], "%s: one first delivery per event: %+v", name, n)
		require.Equal(t, d[projection.Parked], n.Drained, "%s: every parked delivery drained: %+v", name, n)
		for _, o := range []projection.Outcome{projection.Conflict, projection.Quarantined, projection.Rejected} {
			require.Zero(t, d[o], "%s: %v deliveries: %+v", name, o, n)
		}
		// The gate's statements lock in one order; a deadlock is the
		// projection's writes to shared rows in different orders (see
		// projection.Sums), and costs deadlock_timeout each.
		require.Zero(t, n.Deadlocks, "%s: transactions retried after a deadlock (the processor's log names the table and statement): %+v", name, n)
		if c.exact {
			require.Equal(t, int64(deliveries)-distinct, d[projection.Duplicate], "%s: duplicates: %+v", name, n)
		}
	}
}

// RequireSettled asserts that the gate's tables of p's projections are
// settled after the distinct events of a stream (each (aggregate, version)
// once) were all delivered: the applied log holds each of them, every
// version row is at its aggregate's last version, and nothing is parked,
// blocked, quarantined, in conflict or rejected. It reads the tables, not
// p's counts, so it also checks what other processes did to the schema.
func RequireSettled(t testing.TB, p *projection.Processor, events []aggregate.Event) {
	t.Helper()
	requireSettled(t, p, events, false)
}

// requireSettled is RequireSettled; sourceIDs tells that the events were
// delivered through a source that may give them ids of its own.
func requireSettled(t testing.TB, p *projection.Processor, events []aggregate.Event, sourceIDs bool) {
	t.Helper()
	ctx := context.Background()
	last := map[string]int64{}
	for _, e := range events {
		last[e.Aggregate] = max(last[e.Aggregate], e.Version)
	}
	st, err := p.Status(ctx, nil)
	require.NoError(t, err)
	require.Zero(t, st.Rejected.Total, "rejected deliveries")
	for _, s := range st.Projections {
		name := s.Name
		require.Zero(t, s.Parked, "%s: parked leftovers", name)
		require.Zero(t, s.Quarantined, "%s: quarantined events", name)
		require.Zero(t, s.Conflicts+s.ConflictsAcknowledged, "%s: conflicts", name)
		requireAppliedLog(t, p, name, events, sourceIDs)

		got := map[string]int64{}
		var stuck []string
		for after := ""; ; {
			page, err := p.Aggregates(ctx, projection.ListOptions{Projection: name, After: after, Limit: settledPage})
			require.NoError(t, err)
			for _, a := range page {
				got[a.Aggregate] = a.Version
				if a.Parked != 0 || a.Quarantined {
					stuck = append(stuck, fmt.Sprintf("%s (parked %d, quarantined %t)", a.Aggregate, a.Parked, a.Quarantined))
				}
			}
			if len(page) < settledPage {
				break
			}
			after = page[len(page)-1].Aggregate
		}
		require.Empty(t, stuck, "%s: aggregates with parked or quarantined events", name)
		require.Equal(t, last, got, "%s: every aggregate at its last version", name)
	}
}

// settledPage is the page size RequireSettled reads the gate state in.
const settledPage = 10_000

// requireAppliedLog asserts that the applied log of projection name holds
// each of events once, with its hash, and nothing else. (Ids are compared
// only for events that carry one: a source may give events ids of its own,
// as EventStoreDB does.)
//
// An inline projection's entries stand for the id and the hash; with
// sourceIDs, those of events without an id of their own are only required
// to be there.
func requireAppliedLog(t testing.TB, p *projection.Processor, name string, events []aggregate.Event, sourceIDs bool) {
	t.Helper()
	type key struct {
		agg     string
		version int64
	}
	type entry struct {
		id   string
		hash string
	}
	got := map[key]entry{}
	var dup []key
	var entries []projection.AppliedEntry
	for after := ""; ; {
		page, err := p.AppliedLog(context.Background(), projection.ListOptions{Projection: name, After: after, Limit: settledPage})
		require.NoError(t, err)
		if len(page) < settledPage {
			entries = append(entries, page...)
			break
		}
		// The page may end inside an aggregate: keep whole aggregates and
		// read the last one again with the next page.
		lastAgg := page[len(page)-1].Aggregate
		cut := len(page)
		for cut > 0 && page[cut-1].Aggregate == lastAgg {
			cut--
		}
		require.Positive(t, cut, "%s: one aggregate's applied log is longer than a page", name)
		entries = append(entries, page[:cut]...)
		after = page[cut-1].Aggregate
	}
	// An inline projection (projection.Inline) logs only its rows' recent
	// versions, as entries that stand for the id and hash.
	inline := false
	for _, a := range entries {
		inline = inline || a.Entry != nil
	}
	for _, a := range entries {
		k := key{a.Aggregate, a.Version}
		e := entry{id: a.EventID}
		if a.Entry != nil {
			if _, ok := got[k]; ok {
				dup = append(dup, k)
			}
			got[k] = entry{hash: fmt.Sprintf("entry %x", a.Entry)}
			continue
		}
		if a.EventID == "" {
			t.Fatalf("%s v%d: empty id in the applied log", k.agg, k.version)
		}
		if _, ok := got[k]; ok {
			dup = append(dup, k)
		}
		e.hash = fmt.Sprintf("%x", a.Hash)
		got[k] = e
	}
	require.Empty(t, dup, "%s: versions twice in the applied log", name)
	want := make(map[key]entry, len(events))
	last := map[string]int64{}
	for _, ev := range events {
		last[ev.Aggregate] = max(last[ev.Aggregate], ev.Version)
	}
	for _, ev := range events {
		k := key{ev.Aggregate, ev.Version}
		if inline {
			g, ok := got[k]
			switch {
			case ev.Version > last[ev.Aggregate]-projection.InlineLogEntries && sourceIDs && ev.ID == "" && ok:
				// The source gave the event its own id, which the entry
				// stands for: it must be there, whatever it is.
				want[k] = g
				continue
			case ev.Version > last[ev.Aggregate]-projection.InlineLogEntries:
				want[k] = entry{hash: fmt.Sprintf("entry %x", projection.InlineEntry(ev))}
				continue
			case !ok:
				continue // older than the row's log: not kept
			case strings.HasPrefix(g.hash, "entry "):
				want[k] = entry{hash: fmt.Sprintf("entry %x", projection.InlineEntry(ev))}
				continue
			}
		}
		want[k] = entry{ev.ID, fmt.Sprintf("%x", ev.Hash())}
		if g, ok := got[k]; ok && ev.ID == "" {
			g.id = ""
			got[k] = g
		}
	}
	if len(want) == len(got) && reflect.DeepEqual(want, got) {
		return
	}
	var missing, extra, wrong []string
	for k, w := range want {
		switch g, ok := got[k]; {
		case !ok:
			missing = append(missing, fmt.Sprintf("%s v%d", k.agg, k.version))
		case g != w:
			wrong = append(wrong, fmt.Sprintf("%s v%d: %+v, want %+v", k.agg, k.version, g, w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			extra = append(extra, fmt.Sprintf("%s v%d", k.agg, k.version))
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	sort.Strings(wrong)
	t.Fatalf("%s: applied log differs from the events: %d missing %v, %d extra %v, %d wrong %v", name,
		len(missing), head(missing), len(extra), head(extra), len(wrong), head(wrong))
}

// head returns the first few of xs.
func head(xs []string) []string { return xs[:min(len(xs), 5)] }
