package projection

import (
	"bytes"
	"cmp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection/internal/store"
)

// This file holds the gate's records: what a transaction writes besides the
// version rows once it has applied its plans — parked events, drained and
// quarantined ones, corrections of runs cut short, the applied log's full
// pages, conflicts — and the rejected deliveries.

// gateWrites are the gate's writes of one projection's plans.
type gateWrites struct {
	r         *registered
	plans     []*aggPlan
	conflicts []conflict
	// tally receives the drained and quarantined counts.
	tally *counts
	// logInRow tells that the version writes appended the runs' applied-log
	// entries to the version rows (batches); else they go to the applied
	// table (operator actions, whose log starts anew).
	logInRow bool
	// markAggs are the aggregates whose inline rows' marks change (sorted),
	// marks whether each is set (inlineSQL.mark).
	markAggs []string
	marks    []bool
}

// queueWrites queues the gate's writes of projection r's plans, for a batch.
func (a *attempt) queueWrites(b *pgx.Batch, r *registered, plans []*aggPlan, conflicts []conflict) {
	w := gateWrites{r: r, plans: plans, conflicts: conflicts, tally: &a.out.tally[r.index], logInRow: true}
	w.markAggs, w.marks = a.markWrites(r, plans)
	a.p.queueWrites(b, w)
}

// queueWrites queues w: parked inserts and deletes, quarantines, the version
// rows of runs the handler cut short, the applied-log entries (in the
// applied table unless w.logInRow; else the full pages of the rows' logs
// move there), and the conflicts. Every row but the conflicts belongs to an
// aggregate whose version row the transaction holds.
func (p *Processor) queueWrites(b *pgx.Batch, w gateWrites) {
	name, tally := w.r.key, w.tally    // name: the gate key
	inline := w.r.inlineTable() != nil // its rows log what it applies
	var park []aggregate.Event
	var parkHashes [][]byte
	var delAggs, logAggs, logIDs, spill []string
	var delVers, logVers []int64
	var logHashes [][]byte
	for _, pl := range w.plans {
		for _, c := range pl.park {
			park = append(park, c.ev)
			parkHashes = append(parkHashes, c.hash)
		}
		for k, c := range pl.run {
			switch {
			case k < pl.cut:
				if !w.logInRow && !inline {
					logAggs, logVers, logIDs, logHashes = append(logAggs, pl.agg), append(logVers, c.ev.Version), append(logIDs, c.id), append(logHashes, c.hash)
				}
				if c.origin == fromParked {
					tally.drained++
				}
				switch c.origin {
				case fromParked:
					delAggs, delVers = append(delAggs, pl.agg), append(delVers, c.ev.Version)
				case fromQuarantine:
					p.store.Quarantine.QueueDelete(b, name, pl.agg)
				}
			case k == pl.cut:
				if c.origin == fromParked {
					delAggs, delVers = append(delAggs, pl.agg), append(delVers, c.ev.Version)
				}
				msg, _ := escapeText(pl.err.Error()) // a handler's error may echo any bytes
				p.store.Quarantine.QueueUpsert(b, name, pl.agg, store.Event{Version: c.ev.Version, ID: c.id, Hash: c.hash,
					Type: c.ev.Type, Data: c.ev.Data, Metadata: c.ev.Metadata, Error: msg, Attempts: cmp.Or(pl.attempts, p.cfg.MaxAttempts)})
				if c.origin != fromBatch {
					tally.n[Quarantined]++
				}
			default:
				if c.origin == fromBatch {
					park = append(park, c.ev)
					parkHashes = append(parkHashes, c.hash)
				}
			}
		}
		after := pl.after()
		// The version write wrote the planned state; a careful run that cut
		// the plan short corrects it.
		if after != pl.written && after != pl.before {
			trim := pl.written.version - after.version // log entries of the run's cut part
			if inline {
				trim = 0 // the row holds none
			}
			p.store.Versions.QueueSet(b, name, pl.agg, after.version, after.parked, after.blocked, trim)
		}
		if w.logInRow && !inline && crossesPage(pl.before.version, after.version) {
			spill = append(spill, pl.agg)
		}
	}
	if len(park) > 0 {
		p.buf.QueuePark(b, name, park, parkHashes)
	}
	if len(delAggs) > 0 {
		p.buf.QueueDelete(b, name, delAggs, delVers)
	}
	if len(logAggs) > 0 {
		p.store.Applied.QueueInsert(b, name, logAggs, logVers, logIDs, logHashes)
	}
	p.queueSpill(b, name, spill)
	if len(w.conflicts) > 0 {
		p.queueConflicts(b, name, w.conflicts)
	}
	if len(w.markAggs) > 0 {
		b.Queue(w.r.inlineSQL().mark, w.markAggs, w.marks)
	}
}

// queueConflicts upserts the conflicts of a projection, in key order: the
// lock order of the conflicts table.
func (p *Processor) queueConflicts(b *pgx.Batch, projection string, cs []conflict) {
	cs = slices.SortedFunc(slices.Values(cs), func(x, y conflict) int {
		return cmp.Or(strings.Compare(x.agg, y.agg), cmp.Compare(x.version, y.version),
			strings.Compare(x.incoming.id, y.incoming.id), bytes.Compare(x.incoming.hash, y.incoming.hash))
	})
	n := len(cs)
	aggs, states, eids, iids, types := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	vers, counts := make([]int64, n), make([]int64, n)
	ehash, ihash, data, meta := make([][]byte, n), make([][]byte, n), make([][]byte, n), make([][]byte, n)
	for i, c := range cs {
		aggs[i], vers[i], states[i], eids[i], ehash[i] = c.agg, c.version, c.existing.state, c.existing.id, c.existing.hash
		if c.existing.entry != nil {
			ehash[i] = c.existing.entry // an inline row's log entry
		}
		if ehash[i] == nil {
			ehash[i] = []byte{}
		}
		iids[i], ihash[i], types[i], data[i], meta[i], counts[i] = c.incoming.id, c.incoming.hash, c.incoming.ev.Type, c.incoming.ev.Data, c.incoming.ev.Metadata, c.count
	}
	p.store.Conflicts.QueueUpsert(b, projection, store.ConflictRows{Aggregates: aggs, Versions: vers, States: states, ExistingIDs: eids,
		ExistingHashes: ehash, IncomingIDs: iids, IncomingHashes: ihash, Types: types, Data: data, Metadata: meta, Counts: counts})
}

// queueRejected records rejections, in fingerprint order: the lock order of
// the rejected table. Whatever a delivery holds, the insert must succeed:
// text that PostgreSQL cannot store (NUL bytes, invalid UTF-8) goes in
// escaped, with its exact bytes in the raw columns.
func (p *Processor) queueRejected(b *pgx.Batch, rs []rejection) {
	rs = slices.SortedFunc(slices.Values(rs), func(x, y rejection) int { return bytes.Compare(x.fingerprint, y.fingerprint) })
	n := len(rs)
	fps, data, meta := make([][]byte, n), make([][]byte, n), make([][]byte, n)
	srcs, ids, aggs, types, reasons, errs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	rawIDs, rawAggs, rawTypes := make([][]byte, n), make([][]byte, n), make([][]byte, n)
	cts := make([]string, n)
	vers, counts := make([]int64, n), make([]int64, n)
	text := func(s string, raw *[]byte) string {
		e, ok := escapeText(s)
		if !ok {
			*raw = []byte(s)
		}
		return e
	}
	for i, r := range rs {
		fps[i], vers[i], data[i], meta[i], counts[i] = r.fingerprint, r.ev.Version, r.ev.Data, r.ev.Metadata, r.count
		ids[i] = text(r.ev.ID, &rawIDs[i])
		aggs[i] = text(r.ev.Aggregate, &rawAggs[i])
		types[i] = text(r.ev.Type, &rawTypes[i])
		srcs[i], _ = escapeText(r.source)
		cts[i], _ = escapeText(r.ev.ContentType)
		reasons[i], _ = escapeText(r.reason)
		errs[i], _ = escapeText(r.err)
	}
	p.store.Rejected.QueueUpsert(b, store.RejectedRows{Fingerprints: fps, Sources: srcs, IDs: ids, Aggregates: aggs, Versions: vers,
		Types: types, Data: data, Metadata: meta, Reasons: reasons, Errors: errs, Counts: counts, RawIDs: rawIDs, RawAggregates: rawAggs,
		RawTypes: rawTypes, ContentTypes: cts})
}
