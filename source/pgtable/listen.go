package pgtable

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/internal/retry"
)

// listen wakes the readers at every notification on the channel about this
// table's schema, reconnecting when its connection is lost (and waking
// them then, for what it may have missed), until ctx is done.
func (s *Source) listen(ctx context.Context) {
	if s.cfg.channel == "" {
		return
	}
	backoff := retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, MaxElapsed: -1}.Start()
	for ctx.Err() == nil {
		err := s.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		wait, _ := backoff.Next()
		s.log.Warn("pgtable LISTEN connection lost; polling until it is back", "error", err, "retry_in", wait)
		_ = retry.Sleep(ctx, wait)
	}
}

func (s *Source) listenOnce(ctx context.Context) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.cfg.channel}.Sanitize()); err != nil {
		return err
	}
	s.wakeAll()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Payload == "" || n.Payload == s.cfg.schema {
			s.wakeAll()
		}
	}
}
