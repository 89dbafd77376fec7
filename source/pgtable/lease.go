package pgtable

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/internal/retry"
)

// This file holds the leases: session advisory locks on a connection of
// their own, one per partition, and one per live process ("member"), whose
// count tells each process its share. A process that dies loses its
// connection, and PostgreSQL releases its locks at once; the others take
// its partitions at their next balancing (Config.LeaseEvery).

// maxMembers bounds the processes of one Name that count for the share.
const maxMembers = 256

// memberBase is the first lock key of the member slots (partition keys are
// 0 … Partitions-1).
const memberBase = 1 << 20

// lockSpace is the first key of the source's advisory locks: a hash of its
// name and table, positive.
func (c *config) lockSpace() int32 {
	h := fnv.New32a()
	h.Write([]byte("inorder/pgtable\x00" + c.Name + "\x00" + c.table))
	return int32(h.Sum32() & 0x7fffffff)
}

// holdLeases keeps this process's share of the partitions until ctx is
// done, reconnecting when its connection is lost (its locks with it: every
// reader stops first). It keeps the connection, and so the locks, until
// released is closed: the drain commits what was read before another
// process may take the partitions.
func (s *Source) holdLeases(ctx context.Context, released <-chan struct{}) {
	backoff := retry.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, MaxElapsed: -1}.Start()
	for {
		conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
		if err == nil {
			err = s.balance(ctx, conn)
			if ctx.Err() != nil {
				<-released
				_ = conn.Close(context.Background())
				return
			}
			s.stopParts(nil) // the locks went with the connection
			_ = conn.Close(context.Background())
		}
		if ctx.Err() != nil {
			<-released
			return
		}
		s.stats.reconnects.Add(1)
		wait, _ := backoff.Next()
		s.log.Warn("pgtable leases lost, reconnecting", "error", err, "retry_in", wait)
		_ = retry.Sleep(ctx, wait)
	}
}

// balance takes a member slot, then, every LeaseEvery, takes or gives up
// partitions to hold this process's share, until ctx is done or the
// connection fails.
func (s *Source) balance(ctx context.Context, conn *pgx.Conn) error {
	space := s.cfg.lockSpace()
	slot := -1
	for i := range maxMembers {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, space, int32(memberBase+i)).Scan(&ok); err != nil {
			return fmt.Errorf("pgtable: lease: %w", err)
		}
		if ok {
			slot = i
			break
		}
	}
	tick := time.NewTicker(s.cfg.LeaseEvery)
	defer tick.Stop()
	for {
		if err := s.rebalance(ctx, conn, space, slot); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// rebalance moves this process to its share: Partitions divided by the live
// members, the first members by slot taking one more of the remainder.
func (s *Source) rebalance(ctx context.Context, conn *pgx.Conn, space int32, slot int) error {
	P := s.cfg.Partitions
	rows, err := conn.Query(ctx, `SELECT objid::bigint FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1::bigint::oid AND objid >= $2::bigint::oid
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, int64(space), int64(memberBase))
	if err != nil {
		return fmt.Errorf("pgtable: lease members: %w", err)
	}
	members, rank := 0, 0
	for rows.Next() {
		var key int64
		if err := rows.Scan(&key); err != nil {
			rows.Close()
			return fmt.Errorf("pgtable: lease members: %w", err)
		}
		members++
		if int(key-memberBase) < slot {
			rank++
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgtable: lease members: %w", err)
	}
	target := P
	if slot >= 0 && members > 0 {
		target = P / members
		if rank < P%members {
			target++
		}
	} else if slot < 0 {
		target = 0 // more processes than member slots: this one idles
	}
	s.mu.Lock()
	held := make(map[int]bool, len(s.parts))
	for k := range s.parts {
		held[k] = true
	}
	s.mu.Unlock()
	// Give up the partitions beyond the share, the last ones first.
	var drop []int
	for k := P - 1; k >= 0 && len(held)-len(drop) > target; k-- {
		if held[k] {
			drop = append(drop, k)
		}
	}
	if len(drop) > 0 {
		if err := s.releaseParts(ctx, s.stopParts(drop)); err != nil && ctx.Err() == nil {
			s.log.Warn("pgtable: positions of partitions given up not saved; the next holder reads from the last saved", "error", err)
		}
		for _, k := range drop {
			if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1, $2)`, space, int32(k)); err != nil {
				return fmt.Errorf("pgtable: lease: %w", err)
			}
			delete(held, k)
		}
		s.log.Debug("pgtable gave up partitions", "partitions", drop, "members", members)
	}
	// Take free ones up to the share, starting where this slot's share
	// would begin, so processes try different partitions first.
	first := 0
	if members > 0 && slot >= 0 {
		first = rank * P / members
	}
	for i := 0; i < P && len(held) < target; i++ {
		k := (first + i) % P
		if held[k] {
			continue
		}
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, space, int32(k)).Scan(&ok); err != nil {
			return fmt.Errorf("pgtable: lease: %w", err)
		}
		if ok {
			held[k] = true
			s.startPart(ctx, k)
		}
	}
	if len(held) >= target && !s.ready.Swap(true) && s.cfg.OnReady != nil {
		s.cfg.OnReady()
	}
	return nil
}
