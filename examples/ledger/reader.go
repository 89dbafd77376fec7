package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/projection"
)

// PaymentView is one payment as Get serves it: the payment, when it last
// changed, and its ledger legs in version and leg order.
type PaymentView struct {
	Payment
	UpdatedAt time.Time `json:"updated_at"`
	Legs      []Leg     `json:"legs"`
}

// PaymentSummary is one payment as List serves it: the payment without its
// legs.
type PaymentSummary struct {
	Payment
	UpdatedAt time.Time `json:"updated_at"`
}

// filterColumns maps the filters List accepts to their columns.
var filterColumns = map[string]string{"status": "status", "payer": "payer", "payee": "payee"}

// Filters implements projection.Reader: payments are listed by status, payer
// and payee.
func (p *Projection) Filters() []string { return []string{"payee", "payer", "status"} }

// Get implements projection.Reader: it returns the payment's *PaymentView.
func (p *Projection) Get(ctx context.Context, q projection.Querier, aggregate string) (any, bool, error) {
	var v PaymentView
	err := q.QueryRow(ctx, `SELECT payment_id, payer, payee, status, authorized, captured, refunded, version, updated_at
FROM `+p.t.payments+` WHERE payment_id = $1`, aggregate).
		Scan(&v.ID, &v.Payer, &v.Payee, &v.Status, &v.Authorized, &v.Captured, &v.Refunded, &v.Version, &v.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("ledger: get payment: %w", err)
	}
	rows, err := q.Query(ctx, `SELECT payment_id, version, leg, account, amount FROM `+p.t.legs+`
WHERE payment_id = $1 ORDER BY version, leg`, aggregate)
	if err != nil {
		return nil, false, fmt.Errorf("ledger: get legs: %w", err)
	}
	v.Legs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Leg, error) {
		var l Leg
		err := r.Scan(&l.Payment, &l.Version, &l.Leg, &l.Account, &l.Amount)
		return l, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("ledger: get legs: %w", err)
	}
	return &v, true, nil
}

// List implements projection.Reader: it returns *PaymentSummary items.
func (p *Projection) List(ctx context.Context, q projection.Querier, opts projection.ListQuery) ([]any, string, error) {
	limit := opts.PageSize()
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if opts.After != "" {
		where = append(where, `payment_id COLLATE "C" > `+arg(opts.After))
	}
	names := make([]string, 0, len(opts.Filters))
	for name := range opts.Filters {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		col, ok := filterColumns[name]
		if !ok {
			return nil, "", fmt.Errorf("ledger: %w: %q", projection.ErrUnknownFilter, name)
		}
		where = append(where, col+" = "+arg(opts.Filters[name]))
	}
	sql := `SELECT payment_id, payer, payee, status, authorized, captured, refunded, version, updated_at FROM ` + p.t.payments
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, " AND ")
	}
	// One row more than the page tells whether another page follows.
	sql += ` ORDER BY payment_id COLLATE "C" LIMIT ` + arg(limit+1)
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", fmt.Errorf("ledger: list payments: %w", err)
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*PaymentSummary, error) {
		var s PaymentSummary
		err := r.Scan(&s.ID, &s.Payer, &s.Payee, &s.Status, &s.Authorized, &s.Captured, &s.Refunded, &s.Version, &s.UpdatedAt)
		return &s, err
	})
	if err != nil {
		return nil, "", fmt.Errorf("ledger: list payments: %w", err)
	}
	var next string
	if len(ps) > limit {
		ps = ps[:limit]
		next = ps[limit-1].ID
	}
	items := make([]any, len(ps))
	for i, s := range ps {
		items[i] = s
	}
	return items, next, nil
}

// Filters implements projection.Reader (see Projection.Filters).
func (s Simple) Filters() []string { return s.p.Filters() }

// Get implements projection.Reader (see Projection.Get).
func (s Simple) Get(ctx context.Context, q projection.Querier, aggregate string) (any, bool, error) {
	return s.p.Get(ctx, q, aggregate)
}

// List implements projection.Reader (see Projection.List).
func (s Simple) List(ctx context.Context, q projection.Querier, opts projection.ListQuery) ([]any, string, error) {
	return s.p.List(ctx, q, opts)
}

var (
	_ projection.Reader = (*Projection)(nil)
	_ projection.Reader = Simple{}
)
