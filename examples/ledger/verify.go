package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrInvalid is wrapped by the error of Verify when the read model breaks
// the ledger's rules.
var ErrInvalid = errors.New("ledger: read model breaks the ledger's rules")

// Verify is the ledger's Description.Verify: the checks a new generation of
// the ledger passes before it is switched in (projection.Processor.Build):
// every payment version's legs sum to zero (money moves between accounts;
// it is never made or lost), every account's balance is the sum of its
// legs, and no payment captured more than it authorized or refunded more
// than it captured.
func (p *Projection) Verify(ctx context.Context, tx pgx.Tx) error {
	var unbalanced, balances, payments int64
	err := tx.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM (SELECT 1 FROM `+p.t.legs+` GROUP BY payment_id, version HAVING sum(amount) <> 0) u),
  (SELECT count(*) FROM (SELECT account, sum(amount) AS total FROM `+p.t.legs+` GROUP BY account) l
     FULL JOIN `+p.t.balances+` b USING (account) WHERE coalesce(l.total, 0) <> coalesce(b.balance, 0)),
  (SELECT count(*) FROM `+p.t.payments+` WHERE captured > authorized OR refunded > captured OR captured < 0 OR refunded < 0)`).
		Scan(&unbalanced, &balances, &payments)
	if err != nil {
		return fmt.Errorf("ledger: verify: %w", err)
	}
	var problems []string
	if unbalanced > 0 {
		problems = append(problems, fmt.Sprintf("%d payment versions whose legs do not sum to zero", unbalanced))
	}
	if balances > 0 {
		problems = append(problems, fmt.Sprintf("%d accounts whose balance is not the sum of their legs", balances))
	}
	if payments > 0 {
		problems = append(problems, fmt.Sprintf("%d payments that captured more than authorized or refunded more than captured", payments))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(problems, ", "))
	}
	return nil
}

// Verify is the per-event ledger's Description.Verify (see
// Projection.Verify).
func (s Simple) Verify(ctx context.Context, tx pgx.Tx) error { return s.p.Verify(ctx, tx) }
