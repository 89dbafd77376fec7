package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/projection"
)

// filter is a list page's filter and page, parsed from its query string:
// the same fields carry a bulk action's preview and confirmation, so an
// action acts on exactly what the list showed.
type filter struct {
	Projection string
	Aggregate  string
	Action     string // the operator log's
	State      string // effects'
	Kind       string // effects'
	Open       bool   // conflicts and rejected: unresolved only
	Generation int    // 0: the live one
	OlderThan  time.Duration
	AfterID    int64
	Limit      int
}

// maxParam bounds a filter value.
const maxParam = 512

func textParam(s string) (string, bool) {
	s = strings.TrimSpace(s)
	return s, len(s) <= maxParam && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// parseFilter reads a filter from form values (a query string or a posted
// form); msg says what is wrong.
func (h *handler) parseFilter(v url.Values) (f filter, msg string) {
	var ok bool
	for _, p := range []struct {
		name string
		into *string
	}{{"projection", &f.Projection}, {"aggregate", &f.Aggregate}, {"action", &f.Action}, {"state", &f.State}, {"kind", &f.Kind}} {
		if *p.into, ok = textParam(v.Get(p.name)); !ok {
			return f, p.name + " must be at most 512 bytes of valid UTF-8"
		}
	}
	if f.Projection != "" && !slices.Contains(h.proc.Projections(), f.Projection) {
		return f, "unknown projection"
	}
	f.Open = v.Get("open") == "1" || v.Get("open") == "on"
	if s := v.Get("older_than"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return f, "older_than must be a duration such as 10m"
		}
		f.OlderThan = d
	}
	if s := v.Get("generation"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return f, "generation must be a non-negative integer"
		}
		f.Generation = n
	}
	if s := v.Get("after_id"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return f, "after_id must be a non-negative integer"
		}
		f.AfterID = n
	}
	f.Limit = PageSize
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return f, "limit must be a positive integer"
		}
		f.Limit = min(n, MaxPageSize)
	}
	if f.State != "" && !slices.Contains(effects.States, effects.State(f.State)) {
		return f, "unknown effect state"
	}
	return f, ""
}

// query returns the filter as a query string, with overrides.
func (f filter) query(set ...string) string {
	v := url.Values{}
	add := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	add("projection", f.Projection)
	add("aggregate", f.Aggregate)
	add("action", f.Action)
	add("state", f.State)
	add("kind", f.Kind)
	if f.Open {
		v.Set("open", "1")
	}
	if f.OlderThan > 0 {
		v.Set("older_than", f.OlderThan.String())
	}
	if f.AfterID > 0 {
		v.Set("after_id", strconv.FormatInt(f.AfterID, 10))
	}
	if f.Generation > 0 {
		v.Set("generation", strconv.Itoa(f.Generation))
	}
	if f.Limit != PageSize && f.Limit > 0 {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	for i := 0; i+1 < len(set); i += 2 {
		if set[i+1] == "" {
			v.Del(set[i])
		} else {
			v.Set(set[i], set[i+1])
		}
	}
	return v.Encode()
}

func (f filter) listOptions(payloads bool) projection.ListOptions {
	return projection.ListOptions{Projection: f.Projection, Aggregate: f.Aggregate, Action: f.Action, Open: f.Open, Generation: f.Generation,
		OlderThan: f.OlderThan, AfterID: f.AfterID, Limit: f.Limit + 1, OmitPayloads: !payloads}
}

// page is the data of a list page.
type page[T any] struct {
	Filter      filter
	Projections []string
	Rows        []T
	// Next is the query of the next page, "" at the end; More tells a list
	// without cursor that it was cut at the limit.
	Next  string
	More  bool
	Extra any
}

// cut trims a listing fetched with one row more than the limit and says
// whether more follow.
func cut[T any](rows []T, limit int) ([]T, bool) {
	if len(rows) > limit {
		return rows[:limit], true
	}
	return rows, false
}

// overviewData is the overview page.
type overviewData struct {
	Time        time.Time
	Projections []projRow
	Rejected    projection.RejectedCounts
	Sources     []sourceRow
	Effects     []effects.KindStats
	EffectsOn   bool
	TotalsAt    time.Time
}

type projRow struct {
	projection.ProjectionStatus
	Readable    bool
	Generations []projection.Generation
	// Lag is the largest lag of the process's sources that feed it.
	LagKnown  bool
	LagEvents int64
	LagBehind time.Duration
}

type sourceRow struct {
	Name        string
	Kind        string
	InProcess   bool
	Known       bool
	LagEvents   int64
	LagBehind   time.Duration
	Workers     int
	Projections string
	Position    string
	Updated     time.Time
	Age         time.Duration
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	st, err := h.proc.Status(ctx, &projection.StatusOptions{Entries: -1, TotalsMaxAge: projection.DefaultTotalsMaxAge})
	if err != nil {
		h.fail(w, r, "overview", "Overview", err)
		return
	}
	d := overviewData{Time: st.Time, Rejected: st.Rejected, TotalsAt: st.TotalsAt}
	for _, p := range st.Projections {
		row := projRow{ProjectionStatus: p}
		_, err := h.proc.Reader(p.Name)
		row.Readable = err == nil
		for _, g := range st.Generations {
			if g.Projection == p.Name {
				row.Generations = append(row.Generations, g)
			}
		}
		d.Projections = append(d.Projections, row)
	}
	seen := map[string]bool{}
	if h.opts.Sources != nil {
		for _, s := range h.opts.Sources() {
			seen[s.Name] = true
			d.Sources = append(d.Sources, sourceRow{Name: s.Name, Kind: s.Kind, InProcess: true, Known: s.Known, LagEvents: s.Events,
				LagBehind: s.Behind, Workers: s.Workers, Projections: strings.Join(s.Projections, ", ")})
		}
	}
	for _, c := range st.Checkpoints {
		i := slices.IndexFunc(d.Sources, func(s sourceRow) bool { return s.Name == c.Name })
		if i < 0 {
			d.Sources = append(d.Sources, sourceRow{Name: c.Name})
			i = len(d.Sources) - 1
		}
		d.Sources[i].Position, d.Sources[i].Updated, d.Sources[i].Age = c.Position.String(), c.UpdatedAt, c.Age
	}
	if h.opts.Sources != nil {
		for _, s := range h.opts.Sources() {
			for i := range d.Projections {
				if p := &d.Projections[i]; s.Known && slices.Contains(s.Projections, p.Name) {
					p.LagKnown = true
					p.LagEvents, p.LagBehind = max(p.LagEvents, s.Events), max(p.LagBehind, s.Behind)
				}
			}
		}
	}
	if h.opts.Effects != nil {
		d.EffectsOn = true
		if d.Effects, err = h.opts.Effects.Stats(ctx); err != nil {
			h.fail(w, r, "overview", "Overview", err)
			return
		}
	}
	h.render(w, r, http.StatusOK, "overview", view{Title: "Overview", Nav: "overview", Refresh: 2000, Data: d})
}

// aggregateData is the aggregate page.
type aggregateData struct {
	Projection  string
	Projections []string
	ID          string
	Searched    bool
	State       *projection.AggregateState
	Applied     []projection.AppliedEntry
	AppliedMore bool
	Parked      []projection.ParkedEntry
	Quarantine  []projection.QuarantineEntry
	Conflicts   []projection.ConflictEntry
	Rejected    []projection.RejectedEntry
	Readable    bool
	ReadFound   bool
	ReadVersion int64
	ReadModel   string
}

// appliedShown bounds the applied log on the aggregate page.
const appliedShown = 200

func (h *handler) aggregate(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := aggregateData{Projections: h.proc.Projections()}
	d.Projection = q.Get("projection")
	if d.Projection == "" {
		d.Projection = d.Projections[0]
	}
	if !slices.Contains(d.Projections, d.Projection) {
		h.render(w, r, http.StatusNotFound, "aggregate", view{Title: "Aggregate", Nav: "aggregate", Error: "unknown projection", Data: d})
		return
	}
	id, ok := textParam(q.Get("id"))
	if !ok {
		h.render(w, r, http.StatusBadRequest, "aggregate", view{Title: "Aggregate", Nav: "aggregate", Error: "the id must be at most 512 bytes of valid UTF-8", Data: d})
		return
	}
	d.ID = id
	if id == "" {
		h.render(w, r, http.StatusOK, "aggregate", view{Title: "Aggregate", Nav: "aggregate", Data: d})
		return
	}
	d.Searched = true
	ctx, cancel := h.ctx(r)
	defer cancel()
	lo := projection.ListOptions{Projection: d.Projection, Aggregate: id, OmitPayloads: !h.opts.ShowPayloads, Limit: 100}
	states, err := h.proc.Aggregates(ctx, projection.ListOptions{Projection: d.Projection, Aggregate: id, Limit: 1})
	if err == nil && len(states) == 1 {
		d.State = &states[0]
	}
	if err == nil {
		d.Applied, err = h.proc.AppliedLog(ctx, projection.ListOptions{Projection: d.Projection, Aggregate: id, Limit: appliedShown + 1})
		d.Applied, d.AppliedMore = cut(d.Applied, appliedShown)
	}
	if err == nil {
		d.Parked, err = h.proc.Parked(ctx, lo)
	}
	if err == nil {
		d.Quarantine, err = h.proc.Quarantined(ctx, lo)
	}
	if err == nil {
		d.Conflicts, err = h.proc.Conflicts(ctx, lo)
	}
	if err == nil {
		lo.Projection = ""
		d.Rejected, err = h.proc.Rejected(ctx, lo)
	}
	if err == nil {
		if _, rerr := h.proc.Reader(d.Projection); rerr == nil {
			d.Readable = true
			var v projection.AggregateView
			v, err = h.proc.ReadAggregate(ctx, d.Projection, id)
			if err == nil {
				d.ReadFound, d.ReadVersion = v.Found, v.Version
				if v.Found {
					b, merr := json.MarshalIndent(v.Value, "", "  ")
					if merr != nil {
						err = merr
					}
					d.ReadModel = string(b)
				}
			}
		}
	}
	if err != nil {
		h.fail(w, r, "aggregate", "Aggregate", err)
		return
	}
	h.render(w, r, http.StatusOK, "aggregate", view{Title: "Aggregate " + id, Nav: "aggregate", Data: d})
}

// listPage parses the filter and answers a bad one; ok is false then.
func (h *handler) listPage(w http.ResponseWriter, r *http.Request, name, title string) (filter, bool) {
	f, msg := h.parseFilter(r.URL.Query())
	if msg != "" {
		h.render(w, r, http.StatusBadRequest, name, view{Title: title, Nav: name, Error: msg,
			Data: page[struct{}]{Filter: f, Projections: h.proc.Projections()}})
		return f, false
	}
	return f, true
}

// listing answers the list page name of rows fetch returns for its filter
// (listOptions asks for one more than the limit, to tell there are more).
// With id set, a cut page links to the next one after its last row's id;
// without, it says it was cut.
func listing[T any](h *handler, w http.ResponseWriter, r *http.Request, name, title string, payloads bool,
	fetch func(context.Context, projection.ListOptions) ([]T, error), id func(T) int64) {
	f, ok := h.listPage(w, r, name, title)
	if !ok {
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	rows, err := fetch(ctx, f.listOptions(payloads))
	if err != nil {
		h.fail(w, r, name, title, err)
		return
	}
	p := page[T]{Filter: f, Projections: h.proc.Projections()}
	var more bool
	p.Rows, more = cut(rows, f.Limit)
	switch {
	case id == nil:
		p.More = more
	case more:
		p.Next = f.query("after_id", strconv.FormatInt(id(p.Rows[len(p.Rows)-1]), 10))
	}
	h.render(w, r, http.StatusOK, name, view{Title: title, Nav: name, Data: p})
}

func (h *handler) quarantine(w http.ResponseWriter, r *http.Request) {
	listing(h, w, r, "quarantine", "Quarantine", h.opts.ShowPayloads, h.proc.Quarantined, nil)
}

func (h *handler) parked(w http.ResponseWriter, r *http.Request) {
	listing(h, w, r, "parked", "Parked", h.opts.ShowPayloads, h.proc.Parked, nil)
}

func (h *handler) rejected(w http.ResponseWriter, r *http.Request) {
	listing(h, w, r, "rejected", "Rejected", h.opts.ShowPayloads, h.proc.Rejected,
		func(e projection.RejectedEntry) int64 { return e.ID })
}

func (h *handler) conflicts(w http.ResponseWriter, r *http.Request) {
	listing(h, w, r, "conflicts", "Conflicts", h.opts.ShowPayloads, h.proc.Conflicts,
		func(e projection.ConflictEntry) int64 { return e.ID })
}

func (h *handler) effectsPage(w http.ResponseWriter, r *http.Request) {
	f, ok := h.listPage(w, r, "effects", "Effects")
	if !ok {
		return
	}
	p := page[effects.Effect]{Filter: f, Projections: h.proc.Projections()}
	if h.opts.Effects == nil {
		h.render(w, r, http.StatusOK, "effects", view{Title: "Effects", Nav: "effects",
			Notice: "this server has no effects client: the binary has no effect handlers", Data: p})
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	rows, err := h.opts.Effects.List(ctx, projection.ListOptions{State: f.State, Kind: f.Kind, Projection: f.Projection, Limit: f.Limit + 1})
	if err != nil {
		h.fail(w, r, "effects", "Effects", err)
		return
	}
	p.Rows, p.More = cut(rows, f.Limit)
	p.Extra = effects.States
	h.render(w, r, http.StatusOK, "effects", view{Title: "Effects", Nav: "effects", Data: p})
}

func (h *handler) oplog(w http.ResponseWriter, r *http.Request) {
	listing(h, w, r, "log", "Operator log", false, h.proc.OperatorLog,
		func(e projection.OperatorLogEntry) int64 { return e.ID })
}

// rebuildData is the rebuild page.
type rebuildData struct {
	Projection  string
	Projections []string
	Generations []genRow
	CanStart    bool
	Running     *buildState
	HasPrevious bool
}

type genRow struct {
	projection.Generation
	// Num is the generation's number (Generation is the embedded struct).
	Num      int
	Building bool
	Rate     float64
	ETA      time.Duration
	Fraction float64
}

func (h *handler) rebuilds(w http.ResponseWriter, r *http.Request) {
	d := rebuildData{Projections: h.proc.Projections(), CanStart: h.opts.Rebuilds != nil}
	d.Projection = r.URL.Query().Get("projection")
	if d.Projection == "" {
		d.Projection = d.Projections[0]
	}
	if !slices.Contains(d.Projections, d.Projection) {
		h.render(w, r, http.StatusNotFound, "rebuilds", view{Title: "Rebuilds", Nav: "rebuilds", Error: "unknown projection", Data: d})
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	// From the status without its totals: Generations would sum every
	// version row of each generation.
	st, err := h.proc.Status(ctx, &projection.StatusOptions{NoTotals: true, Entries: -1})
	if err != nil {
		h.fail(w, r, "rebuilds", "Rebuilds", err)
		return
	}
	var gens []projection.Generation
	for _, g := range st.Generations {
		if g.Projection == d.Projection {
			gens = append(gens, g)
		}
	}
	now := time.Now()
	d.Running = h.builds.get(d.Projection)
	keep := map[string]bool{}
	for _, g := range gens {
		row := genRow{Generation: g, Num: g.Generation, Rate: -1, ETA: -1, Fraction: -1}
		if g.State == projection.StateBuilding || g.State == projection.StateCatchUp {
			row.Building = true
			keep[g.Key] = true
			e := h.rates.observe(g.Key, now, g.Events, g.PositionTime)
			row.Rate, row.ETA = e.Rate, e.ETA
			if b := d.Running; b != nil && b.Progress.Generation == g.Generation && !b.Done {
				// Built by this process: the stream's own progress.
				row.Fraction = b.Progress.Fraction
				if b.Progress.Fraction >= 0 {
					row.ETA = b.Progress.ETA
				}
			}
		}
		if g.State == projection.StatePrevious {
			d.HasPrevious = true
		}
		d.Generations = append(d.Generations, row)
	}
	h.rates.forget(keep)
	slices.Reverse(d.Generations) // newest first
	h.render(w, r, http.StatusOK, "rebuilds", view{Title: "Rebuilds", Nav: "rebuilds", Refresh: 1000, Data: d})
}
