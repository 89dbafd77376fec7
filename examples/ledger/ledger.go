package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/projection"
)

// Event types of the ledger.
const (
	Authorized = "payment.authorized"
	Approved   = "payment.approved"
	Captured   = "payment.captured"
	Refunded   = "payment.refunded"
	Voided     = "payment.voided"
	Failed     = "payment.failed"
)

// Types lists every event type the ledger understands.
var Types = []string{Authorized, Approved, Captured, Refunded, Voided, Failed}

// Data is the JSON payload of ledger events. Authorized sets Payer, Payee and
// Amount; Captured and Refunded set Amount; the others carry nothing
// (Failed may carry a Reason).
type Data struct {
	Payer  string `json:"payer,omitempty"`
	Payee  string `json:"payee,omitempty"`
	Amount int64  `json:"amount,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Payment is a payment's read model.
type Payment struct {
	ID         string `json:"id"`
	Payer      string `json:"payer"`
	Payee      string `json:"payee"`
	Status     string `json:"status"`
	Authorized int64  `json:"authorized"`
	Captured   int64  `json:"captured"`
	Refunded   int64  `json:"refunded"`
	Version    int64  `json:"version"`
}

// Leg is one ledger entry: a signed amount on an account, caused by one
// version of one payment.
type Leg struct {
	Payment string `json:"payment"`
	Version int64  `json:"version"`
	Leg     int16  `json:"leg"`
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// Account names: a party's available funds and its funds on hold.
func available(party string) string { return party + ":available" }
func held(party string) string      { return party + ":held" }

// Step applies one event to a payment's state (nil before its first event)
// and returns the new state and the legs it produces. It is the single
// definition of the ledger's rules, used by the projection and by Fold.
func Step(p *Payment, e aggregate.Event) (*Payment, []Leg, error) {
	var d Data
	if err := json.Unmarshal(e.Data, &d); err != nil {
		return nil, nil, fmt.Errorf("ledger: %s %s v%d: %w", e.Type, e.Aggregate, e.Version, err)
	}
	if p == nil {
		if e.Type != Authorized {
			return nil, nil, fmt.Errorf("ledger: payment %s starts with %s, not %s", e.Aggregate, e.Type, Authorized)
		}
		p = &Payment{ID: e.Aggregate}
	} else {
		cp := *p
		p = &cp
	}
	if e.Version != p.Version+1 {
		return nil, nil, fmt.Errorf("ledger: payment %s at version %d cannot take version %d", p.ID, p.Version, e.Version)
	}
	p.Version = e.Version
	var legs []Leg
	move := func(from, to string, amount int64) {
		if amount <= 0 {
			return
		}
		legs = append(legs,
			Leg{Payment: p.ID, Version: e.Version, Leg: 1, Account: from, Amount: -amount},
			Leg{Payment: p.ID, Version: e.Version, Leg: 2, Account: to, Amount: amount})
	}
	switch e.Type {
	case Authorized:
		if p.Status != "" {
			return nil, nil, fmt.Errorf("ledger: payment %s authorized twice", p.ID)
		}
		if d.Payer == "" || d.Payee == "" || d.Amount <= 0 {
			return nil, nil, fmt.Errorf("ledger: payment %s: authorization needs payer, payee and a positive amount", p.ID)
		}
		p.Payer, p.Payee, p.Authorized, p.Status = d.Payer, d.Payee, d.Amount, "authorized"
		move(available(p.Payer), held(p.Payer), d.Amount)
	case Approved:
		if p.Status == "authorized" {
			p.Status = "approved"
		}
	case Captured:
		amt := min(d.Amount, p.Authorized-p.Captured)
		if p.Status == "voided" || p.Status == "failed" {
			amt = 0
		}
		p.Captured += max(amt, 0)
		if amt > 0 {
			p.Status = "captured"
		}
		move(held(p.Payer), available(p.Payee), amt)
	case Refunded:
		amt := min(d.Amount, p.Captured-p.Refunded)
		p.Refunded += max(amt, 0)
		if amt > 0 {
			p.Status = "refunded"
		}
		move(available(p.Payee), available(p.Payer), amt)
	case Voided:
		if p.Status != "voided" && p.Status != "failed" {
			move(held(p.Payer), available(p.Payer), p.Authorized-p.Captured)
			p.Status = "voided"
		}
	case Failed:
		if p.Status != "voided" && p.Status != "failed" {
			move(held(p.Payer), available(p.Payer), p.Authorized-p.Captured)
			p.Status = "failed"
		}
	default:
		return nil, nil, fmt.Errorf("ledger: payment %s: %w: %q", p.ID, aggregate.ErrUnknownType, e.Type)
	}
	return p, legs, nil
}

// Projection is the ledger projection. The zero value uses unqualified table
// names (the connection's search_path).
type Projection struct {
	name   string
	schema string
	t      tables
	fx     *effects.Client
	// payments is the upsert of the payment rows, whose table carries
	// the gate's state when inline (else version rows: Options.VersionRows).
	payments projection.InlineUpsert
	inline   bool
}

type tables struct {
	payments, legs, balances string
	balancesID               pgx.Identifier // balances, for projection.Sums
}

// Options configures New. The zero value is valid.
type Options struct {
	// Name is the projection's name; default "ledger".
	Name string
	// Schema holds the read-model tables; default: unqualified names,
	// resolved through the connection's search_path.
	Schema string
	// VersionRows keeps the gate's state in inorder's version rows instead
	// of the payment row (the projection is then not inline: see
	// projection.Inline), as a projection without such a row must.
	VersionRows bool
	// LogEntries is the payment row's conflict horizon
	// (projection.InlineTable.LogEntries): how many of its last versions
	// its applied log keeps. Default projection.InlineLogEntries (16).
	LogEntries int
	// Effects, if set, records a "payment settled" webhook intent
	// (SettledWebhook) for every capture that moves money, in the
	// transaction that applies it; a Webhook handler registered on the
	// client sends it. Nil records nothing.
	Effects *effects.Client
}

// New returns the ledger projection.
func New(opts *Options) *Projection {
	if opts == nil {
		opts = &Options{}
	}
	p := &Projection{name: opts.Name, schema: opts.Schema, fx: opts.Effects}
	if p.name == "" {
		p.name = "ledger"
	}
	id := func(t string) pgx.Identifier {
		if p.schema == "" {
			return pgx.Identifier{t}
		}
		return pgx.Identifier{p.schema, t}
	}
	q := func(t string) string { return id(t).Sanitize() }
	p.t = tables{payments: q("ledger_payments"), legs: q("ledger_legs"), balances: q("ledger_balances"),
		balancesID: id("ledger_balances")}
	// A payment's row: its parties are written once, its status and
	// amounts by every event; the version and log columns are the gate's.
	p.payments = projection.InlineUpsert{
		Table: projection.InlineTable{Table: id("ledger_payments"), Key: "payment_id", Version: "version", Log: "inorder_log",
			LogEntries: opts.LogEntries},
		Alias: "pm",
		Columns: []projection.InlineColumn{
			{Name: "payer", Type: "text", InsertOnly: true},
			{Name: "payee", Type: "text", InsertOnly: true},
			{Name: "status", Type: "text"},
			{Name: "authorized", Type: "bigint"},
			{Name: "captured", Type: "bigint"},
			{Name: "refunded", Type: "bigint"},
		},
		Set: []string{"updated_at = now()"},
	}
	p.inline = !opts.VersionRows
	return p
}

// InlineTable implements projection.Inline: a payment's row carries its
// version and applied log, so the gate writes no row of its own on the fast
// path (unless Options.VersionRows).
func (p *Projection) InlineTable() (projection.InlineTable, bool) {
	if !p.inline {
		return projection.InlineTable{}, false
	}
	return p.payments.Table, true
}

// Name implements projection.Projection.
func (p *Projection) Name() string { return p.name }

// Describe implements projection.Describer: the ledger lists its event
// types (Types: the processor rejects any other type before the ledger sees
// it), moves a payment past versions that will never come (Gap), and checks
// a new generation before it is switched in (Verify). Its code is at
// version 1.
func (p *Projection) Describe() projection.Description {
	return projection.Description{Types: p.Types(), Gap: p.Gap, Verify: p.Verify}
}

// Types lists the event types the ledger handles (Description.Types).
func (p *Projection) Types() []string { return slices.Clone(Types) }

// UseEffects implements effects.Binder: the projection records its
// settlement webhooks with c from now on (as with Options.Effects). Call it
// before the projection processes anything.
func (p *Projection) UseEffects(c *effects.Client) { p.fx = c }

// Setup implements projection.Tables: it creates the read-model tables if
// they do not exist.
func (p *Projection) Setup(ctx context.Context, tx pgx.Tx) error {
	stmts := []string{}
	if p.schema != "" {
		stmts = append(stmts, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{p.schema}.Sanitize())
	}
	stmts = append(stmts,
		`CREATE TABLE IF NOT EXISTS `+p.t.payments+` (
  payment_id text PRIMARY KEY, payer text NOT NULL, payee text NOT NULL, status text NOT NULL,
  authorized bigint NOT NULL, captured bigint NOT NULL, refunded bigint NOT NULL,
  version bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(),
  inorder_log bytea NOT NULL DEFAULT '')`,
		`ALTER TABLE `+p.t.payments+` ADD COLUMN IF NOT EXISTS inorder_log bytea NOT NULL DEFAULT ''`,
		`CREATE TABLE IF NOT EXISTS `+p.t.legs+` (
  payment_id text NOT NULL, version bigint NOT NULL, leg smallint NOT NULL,
  account text NOT NULL, amount bigint NOT NULL, PRIMARY KEY (payment_id, version, leg))`,
		`CREATE TABLE IF NOT EXISTS `+p.t.balances+` (account text PRIMARY KEY, balance bigint NOT NULL)`,
	)
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return fmt.Errorf("create tables: %w", err)
		}
	}
	return nil
}

// Reset implements projection.Tables: it empties the read model, for a
// rebuild.
func (p *Projection) Reset(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `TRUNCATE `+p.t.payments+`, `+p.t.legs+`, `+p.t.balances)
	if err != nil {
		return fmt.Errorf("truncate tables: %w", err)
	}
	return nil
}

// ApplyBatch implements projection.BatchHandler: it reads the payments of the
// batch in one query, folds the events in Go, and writes payments, legs and
// balances with three set-based statements; with Options.Effects, it
// records the batch's settlement webhooks with one more call.
func (p *Projection) ApplyBatch(ctx context.Context, tx *projection.Tx, events []aggregate.Event) error {
	w, err := p.fold(ctx, tx, events)
	if err != nil {
		return err
	}
	if err := w.queue(tx, p.t, &p.payments); err != nil {
		return err
	}
	return p.recordSettlements(ctx, tx, w)
}

// recordSettlements records the settlement webhooks of a batch's writes.
func (p *Projection) recordSettlements(ctx context.Context, tx *projection.Tx, w *writes) error {
	if p.fx == nil || len(w.settled) == 0 {
		return nil
	}
	intents := make([]effects.Intent, len(w.settled))
	for i, s := range w.settled {
		intents[i] = effects.Intent{Kind: SettledWebhook, Event: s.event, Args: s.payload}
	}
	if _, err := p.fx.Record(ctx, tx, intents...); err != nil {
		return fmt.Errorf("ledger: record settlement webhooks: %w", err)
	}
	return nil
}

// writes are the set-based writes of a batch, and the settlements it makes.
type writes struct {
	payments []*Payment
	legs     []Leg
	// balances are the changes to the accounts' balances, shared rows
	// that the payments of every worker update: the transaction's
	// projection.TxSums, written after the handler's last call in account
	// order, so that concurrent batches cannot deadlock.
	balances *projection.Sums[string]
	settled  []settlement
}

// settlement is a capture that moved money, and its webhook's payload.
type settlement struct {
	event   aggregate.Event
	payload Settled
}

func (p *Projection) fold(ctx context.Context, tx *projection.Tx, events []aggregate.Event) (*writes, error) {
	ids := make([]string, 0, len(events))
	for i, e := range events {
		if i == 0 || e.Aggregate != events[i-1].Aggregate {
			ids = append(ids, e.Aggregate)
		}
	}
	state := make(map[string]*Payment, len(ids))
	rows, err := tx.Query(ctx, `SELECT payment_id, payer, payee, status, authorized, captured, refunded, version
FROM `+p.t.payments+` WHERE payment_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("ledger: read payments: %w", err)
	}
	for rows.Next() {
		var pm Payment
		if err := rows.Scan(&pm.ID, &pm.Payer, &pm.Payee, &pm.Status, &pm.Authorized, &pm.Captured, &pm.Refunded, &pm.Version); err != nil {
			rows.Close()
			return nil, fmt.Errorf("ledger: read payments: %w", err)
		}
		state[pm.ID] = &pm
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: read payments: %w", err)
	}
	// The transaction's Sums: the balances of all the handler's calls (the
	// per-event Simple's too) are written once, in account order.
	return foldInto(state, events, projection.TxSums[string](tx, p.t.balancesID, "account", "balance"))
}

func foldInto(state map[string]*Payment, events []aggregate.Event, balances *projection.Sums[string]) (*writes, error) {
	w := &writes{balances: balances}
	for i, e := range events {
		prev := state[e.Aggregate]
		next, legs, err := Step(prev, e)
		if err != nil {
			return nil, err
		}
		state[e.Aggregate] = next
		if s, ok := settles(prev, next, e); ok {
			w.settled = append(w.settled, settlement{event: e, payload: s})
		}
		if i == len(events)-1 || events[i+1].Aggregate != e.Aggregate {
			w.payments = append(w.payments, next)
		}
		for _, l := range legs {
			w.legs = append(w.legs, l)
			w.balances.Add(l.Account, l.Amount)
		}
	}
	return w, nil
}

// queue queues the writes of payments and legs; the balances are the
// transaction's projection.TxSums, upserted after the handler's last call in
// account order, so concurrent transactions lock them in the same order. The
// payments' upsert carries the gate's compare-and-set and log when the
// handler runs inline (projection.InlineUpsert.Queue adds them).
func (w *writes) queue(tx *projection.Tx, t tables, payments *projection.InlineUpsert) error {
	n := len(w.payments)
	ids, payers, payees, statuses := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	auth, capt, refd, vers := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, pm := range w.payments {
		ids[i], payers[i], payees[i], statuses[i] = pm.ID, pm.Payer, pm.Payee, pm.Status
		auth[i], capt[i], refd[i], vers[i] = pm.Authorized, pm.Captured, pm.Refunded, pm.Version
	}
	if err := payments.Queue(tx, ids, vers, payers, payees, statuses, auth, capt, refd); err != nil {
		return fmt.Errorf("ledger: write payments: %w", err)
	}
	if len(w.legs) > 0 {
		m := len(w.legs)
		pays, accts := make([]string, m), make([]string, m)
		lvers, amts := make([]int64, m), make([]int64, m)
		legs := make([]int16, m)
		for i, l := range w.legs {
			pays[i], lvers[i], legs[i], accts[i], amts[i] = l.Payment, l.Version, l.Leg, l.Account, l.Amount
		}
		tx.Queue(`INSERT INTO `+t.legs+` (payment_id, version, leg, account, amount)
SELECT * FROM unnest($1::text[], $2::bigint[], $3::smallint[], $4::text[], $5::bigint[])`, pays, lvers, legs, accts, amts)
	}
	return nil
}

// Load reads the whole read model, for comparison with Fold.
func (p *Projection) Load(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) (*Model, error) {
	m := &Model{Payments: map[string]Payment{}, Balances: map[string]int64{}}
	rows, err := q.Query(ctx, `SELECT payment_id, payer, payee, status, authorized, captured, refunded, version FROM `+p.t.payments)
	if err != nil {
		return nil, fmt.Errorf("ledger: load payments: %w", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Payment, error) {
		var pm Payment
		err := r.Scan(&pm.ID, &pm.Payer, &pm.Payee, &pm.Status, &pm.Authorized, &pm.Captured, &pm.Refunded, &pm.Version)
		return pm, err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: load payments: %w", err)
	}
	for _, pm := range ps {
		m.Payments[pm.ID] = pm
	}
	rows, err = q.Query(ctx, `SELECT payment_id, version, leg, account, amount FROM `+p.t.legs)
	if err != nil {
		return nil, fmt.Errorf("ledger: load legs: %w", err)
	}
	m.Legs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Leg, error) {
		var l Leg
		err := r.Scan(&l.Payment, &l.Version, &l.Leg, &l.Account, &l.Amount)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("ledger: load legs: %w", err)
	}
	rows, err = q.Query(ctx, `SELECT account, balance FROM `+p.t.balances)
	if err != nil {
		return nil, fmt.Errorf("ledger: load balances: %w", err)
	}
	for rows.Next() {
		var a string
		var b int64
		if err := rows.Scan(&a, &b); err != nil {
			rows.Close()
			return nil, err
		}
		m.Balances[a] = b
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("ledger: load balances: %w", err)
	}
	m.normalize()
	return m, nil
}

// Gap is the ledger's Description.Gap: versions From…To of a payment will
// never come (an operator declared them missing, or skipped a quarantined
// one), so the payment's version moves past them and the next version
// applies. The legs of the missing versions are missing too: the gap stays
// visible in the read model, as an operator decided. A payment whose first
// versions are missing gets a row with status "incomplete" and no parties.
func (p *Projection) Gap(ctx context.Context, tx *projection.Tx, g projection.Gap) error {
	tx.Queue(`INSERT INTO `+p.t.payments+` AS pm (payment_id, payer, payee, status, authorized, captured, refunded, version)
VALUES ($1, '', '', 'incomplete', 0, 0, 0, $2)
ON CONFLICT (payment_id) DO UPDATE SET version = $2, updated_at = now() WHERE pm.version = $3`, g.Aggregate, g.To, g.From-1)
	return nil
}

// Simple wraps the ledger as a per-event projection (projection.EventHandler):
// each event reads its payment and queues its writes. It produces the same
// read model as Projection, more slowly; it exists to show and test the
// per-event API.
type Simple struct{ p *Projection }

// NewSimple returns the per-event variant of the ledger projection.
func NewSimple(opts *Options) Simple { return Simple{New(opts)} }

// Name implements projection.Projection.
func (s Simple) Name() string { return s.p.Name() }

// UseEffects implements effects.Binder (see Projection.UseEffects).
func (s Simple) UseEffects(c *effects.Client) { s.p.UseEffects(c) }

// Setup implements projection.Tables (see Projection.Setup).
func (s Simple) Setup(ctx context.Context, tx pgx.Tx) error { return s.p.Setup(ctx, tx) }

// Reset implements projection.Tables (see Projection.Reset).
func (s Simple) Reset(ctx context.Context, tx pgx.Tx) error { return s.p.Reset(ctx, tx) }

// Load reads the whole read model (see Projection.Load).
func (s Simple) Load(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) (*Model, error) {
	return s.p.Load(ctx, q)
}

// Describe implements projection.Describer: the per-event ledger moves a
// payment past versions that will never come (Gap) and checks a new
// generation (Verify), as Projection does; it does not list its types, so
// it accepts every type.
func (s Simple) Describe() projection.Description {
	return projection.Description{Gap: s.Gap, Verify: s.Verify}
}

// Gap is the per-event ledger's Description.Gap (see Projection.Gap).
func (s Simple) Gap(ctx context.Context, tx *projection.Tx, g projection.Gap) error {
	return s.p.Gap(ctx, tx, g)
}

// InlineTable implements projection.Inline (see Projection.InlineTable).
func (s Simple) InlineTable() (projection.InlineTable, bool) { return s.p.InlineTable() }

// Apply implements projection.EventHandler.
func (s Simple) Apply(ctx context.Context, tx *projection.Tx, e aggregate.Event) error {
	w, err := s.p.fold(ctx, tx, []aggregate.Event{e})
	if err != nil {
		return err
	}
	if err := w.queue(tx, s.p.t, &s.p.payments); err != nil {
		return err
	}
	return s.p.recordSettlements(ctx, tx, w)
}

var (
	_ projection.BatchHandler = (*Projection)(nil)
	_ projection.EventHandler = Simple{}
	_ projection.Tables       = (*Projection)(nil)
	_ projection.Tables       = Simple{}
	_ projection.Describer    = (*Projection)(nil)
	_ projection.Describer    = Simple{}
	_ effects.Binder          = (*Projection)(nil)
	_ effects.Binder          = Simple{}
	_ projection.Inline       = (*Projection)(nil)
	_ projection.Inline       = Simple{}
)
