package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	esdbc "github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/buffer"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source/esdb"
)

// repairOptions configures parked repair.
type repairOptions struct {
	log        logOptions
	db         dbOptions
	es         esdbOptions
	out        outputOptions
	a          *app
	Projection string
	OlderThan  time.Duration
	Limit      int
	Aggregate  string
}

func (o *repairOptions) validate(args []string) error {
	switch len(args) {
	case 0:
	case 1:
		if args[0] == "" {
			return usageErrorf("empty aggregate")
		}
		o.Aggregate = args[0]
	default:
		return usageErrorf("unexpected argument %q", args[1])
	}
	if o.Projection != "" {
		if _, err := o.a.pickProjection(o.Projection); err != nil {
			return err
		}
	}
	if o.Limit < 1 {
		return usageErrorf("--limit must be at least 1")
	}
	if o.OlderThan < 0 {
		return usageErrorf("--older-than must not be negative")
	}
	for _, v := range []interface{ validate() error }{&o.log, &o.db, &o.es} {
		if err := v.validate(); err != nil {
			return err
		}
	}
	return nil
}

// parkedRepairCmd reads the missing versions of waiting aggregates from
// EventStoreDB.
type parkedRepairCmd struct{ a *app }

func (c *parkedRepairCmd) command() *command {
	return leaf("repair", "[aggregate]", "read the missing versions of waiting aggregates from EventStoreDB, once",
		`Runs gap repair once, now: for the given aggregate, or for every aggregate
with parked events (--older-than, --limit), reads the versions it waits for
straight from its stream (--stream-prefix + aggregate id; mapped like 'run')
and feeds them through the gate, which applies them and drains the parked
events behind them. Versions the stream does not have — deleted, truncated,
never written — are reported: decide with 'parked declare-gap'.

The workers do the same on their own for aggregates parked longer than
their --repair-after; this command is for not waiting.

Changes: like any delivery, the events read are applied (and the parked
events behind them drained), or parked, or discarded as duplicates.`,
		func(fs *flagSet) *repairOptions {
			o := &repairOptions{a: c.a}
			bindLog(fs, &o.log, "warn")
			bindDB(fs, &o.db)
			bindESDB(fs, &o.es)
			bindOutput(fs, &o.out)
			fs.StringVar(&o.Projection, "projection", "", "only aggregates waiting in this `projection`")
			fs.DurationVar(&o.OlderThan, "older-than", 0, "only aggregates whose oldest parked event waited at least this `duration`")
			fs.IntVar(&o.Limit, "limit", 100, "at most this many `aggregates`")
			return o
		}, c.Run)
}

// RepairReport is one aggregate of parked repair --json.
type RepairReport struct {
	Aggregate string `json:"aggregate"`
	// From and To are the versions looked for.
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Found is how many of them the stream had; they were processed.
	Found int `json:"found"`
	// Missing lists the versions the stream does not have, as ranges.
	Missing []string `json:"missing,omitempty"`
	// Reason says why the stream had nothing (not found, deleted).
	Reason string `json:"reason,omitempty"`
	// Applied is the aggregate's applied version afterwards, per
	// projection.
	Applied map[string]int64 `json:"applied"`
}

// Run repairs.
func (c *parkedRepairCmd) Run(ctx context.Context, o *repairOptions) error {
	logger := c.a.logger(&o.log)
	pool, err := connect(ctx, &o.db, 4, logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	proc, err := c.a.processor(pool, o.db.Schema, logger)
	if err != nil {
		return err
	}
	waiting, err := proc.Buffer().Waiting(ctx, pool, buffer.ListOptions{Projection: o.Projection, Aggregate: o.Aggregate, OlderThan: o.OlderThan, Limit: o.Limit})
	if err != nil {
		return err
	}
	// One read per aggregate, covering what every projection waits for.
	var order []string
	gaps := map[string]*RepairReport{}
	for _, w := range waiting {
		from, to := w.Missing()
		g := gaps[w.Aggregate]
		if g == nil {
			g = &RepairReport{Aggregate: w.Aggregate, From: from, To: to, Applied: map[string]int64{}}
			gaps[w.Aggregate] = g
			order = append(order, w.Aggregate)
		}
		g.From, g.To = min(g.From, from), max(g.To, to)
	}
	reports := make([]RepairReport, 0, len(order))
	if len(order) > 0 {
		client, err := newESDBClient(o.es.URL, logger)
		if err != nil {
			return err
		}
		defer client.Close()
		for _, agg := range order {
			g := gaps[agg]
			if err := repairOne(ctx, client, proc, &o.es, g); err != nil {
				return fmt.Errorf("repair %s: %w", agg, err)
			}
			for _, name := range proc.Projections() {
				if g.Applied[name], err = proc.Version(ctx, name, agg); err != nil {
					return err
				}
			}
			reports = append(reports, *g)
		}
	}
	if o.out.JSON {
		return writeJSON(c.a.stdout, reports)
	}
	if len(reports) == 0 {
		fmt.Fprintln(c.a.stdout, "no aggregate is waiting")
		return nil
	}
	t := newTable(c.a.stdout, "AGGREGATE", "LOOKED FOR", "FOUND", "MISSING AT SOURCE", "APPLIED NOW")
	for _, r := range reports {
		missing := "-"
		if len(r.Missing) > 0 {
			missing = fmt.Sprint(r.Missing)
			if r.Reason != "" {
				missing += " (" + r.Reason + ")"
			}
		}
		var applied string
		for _, name := range proc.Projections() {
			if applied != "" {
				applied += " "
			}
			applied += name + "=" + strconv.FormatInt(r.Applied[name], 10)
		}
		t.row(r.Aggregate, fmt.Sprintf("%d-%d", r.From, r.To), r.Found, missing, applied)
	}
	return t.flush()
}

// repairOne reads versions g.From…g.To of one aggregate's stream and
// processes what it finds.
func repairOne(ctx context.Context, client *esdbc.Client, proc *projection.Processor, o *esdbOptions, g *RepairReport) error {
	m := o.mapping()
	stream := m.Stream(g.Aggregate)
	// With versions from revisions, read exactly the missing revisions;
	// with versions from metadata, read the whole stream.
	opts, count := esdbc.ReadStreamOptions{From: esdbc.Revision(uint64(g.From - 1))}, uint64(g.To-g.From+1)
	if o.VersionField != "" {
		opts, count = esdbc.ReadStreamOptions{From: esdbc.Start{}}, ^uint64(0)
	}
	rs, err := client.ReadStream(ctx, stream, opts, count)
	if err != nil {
		return fmt.Errorf("esdb: read %s: %w", stream, err)
	}
	defer rs.Close()
	var events []aggregate.Event
	have := map[int64]bool{}
	for {
		ev, err := rs.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		var esErr *esdbc.Error
		if errors.As(err, &esErr) && (esErr.Code() == esdbc.ErrorCodeResourceNotFound || esErr.Code() == esdbc.ErrorCodeStreamDeleted) {
			g.Reason = fmt.Sprintf("stream %s not found or deleted", stream)
			break
		}
		if err != nil {
			return fmt.Errorf("esdb: read %s: %w", stream, err)
		}
		e, err := m.Map(ev.Event)
		if errors.Is(err, esdb.ErrSkipped) || e.Version < g.From || e.Version > g.To {
			continue
		}
		// An invalid event goes through too: the processor rejects it.
		events = append(events, e)
		have[e.Version] = true
	}
	if len(events) > 0 {
		if _, err := proc.Process(ctx, projection.Batch{Events: events, Source: "repair"}); err != nil {
			return err
		}
	}
	g.Found = len(have)
	for v := g.From; v <= g.To; v++ {
		if have[v] {
			continue
		}
		end := v
		for end < g.To && !have[end+1] {
			end++
		}
		r := strconv.FormatInt(v, 10)
		if end > v {
			r += "-" + strconv.FormatInt(end, 10)
		}
		g.Missing = append(g.Missing, r)
		v = end
	}
	return nil
}
