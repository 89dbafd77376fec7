package ledgertest

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/examples/ledger"
	"github.com/inorder/inorder/projection"
)

// OpenProcessor returns, in a test's child process, a processor of the
// ledger on the test's schema (its database URL and schema name, passed in
// the child's environment), logging to logger (nil: the processor's
// default), and the close of its pool.
func OpenProcessor(ctx context.Context, url, schema string, logger *slog.Logger) (*projection.Processor, func(), error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, fmt.Errorf("pool: %w", err)
	}
	proc, err := projection.New(pool, &projection.Config{Schema: schema, Logger: logger}, ledger.New(nil))
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("processor: %w", err)
	}
	return proc, pool.Close, nil
}
