package pgtable

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// replayPage is how many rows one read of a replay fetches.
const replayPage = 4096

// Replayer reads an events table from its start, in (txid, seq) order, for
// rebuilds: Read is the projection.Stream of a side-by-side rebuild
// (Processor.Build), Replay the projection.Replay of one in place
// (Processor.Build with BuildOptions.InPlace). Both read up to the end every reader sees when they
// begin (the rows of transactions older than any still running), so the
// rows after it are the live workers' to apply.
type Replayer struct {
	cfg  *config
	pool *pgxpool.Pool

	total, read atomic.Int64
}

// NewReplayer returns a Replayer of the table cfg maps (Pool or URL, Schema,
// Table; Workers and BatchSize size Replay). Processor may be nil.
func NewReplayer(cfg *Config) (*Replayer, error) {
	c, err := newConfig(cfg, false)
	if err != nil {
		return nil, err
	}
	r := &Replayer{cfg: c, pool: c.Pool}
	if r.pool == nil {
		if r.pool, err = pgxpool.New(context.Background(), c.URL); err != nil {
			return nil, fmt.Errorf("pgtable: %w", err)
		}
	}
	return r, nil
}

// Progress says how far the running (or last) read is.
func (r *Replayer) Progress() source.ReplayProgress {
	return source.ReplayProgress{Read: r.read.Load(), Fraction: r.Fraction()}
}

// Fraction is the share of the rows to read already read (0 to 1): the
// projection.StreamProgress of Read.
func (r *Replayer) Fraction() float64 {
	t, n := r.total.Load(), r.read.Load()
	if t <= 0 {
		return 0
	}
	return min(float64(n)/float64(t), 1)
}

// Read reads the table in order from right after position from (nil: its
// start) up to its end when called, and calls fn with pages of up to 4096
// rows: their events (invalid ones too: the rebuild records them as
// rejected), the position of the page's last row and its time. It
// implements projection.Stream.
func (r *Replayer) Read(ctx context.Context, from projection.Position, fn func(context.Context, projection.StreamBatch) error) error {
	var at pos
	if len(from) > 0 {
		var err error
		if at, err = decodePos(from); err != nil {
			return fmt.Errorf("pgtable: read from %s: %w", from, err)
		}
	}
	return r.scan(ctx, at, func(rows []row) error {
		sb := projection.StreamBatch{Events: make([]aggregate.Event, len(rows)), Read: int64(len(rows))}
		for i := range rows {
			sb.Events[i] = rows[i].ev
		}
		last := rows[len(rows)-1]
		sb.Position, sb.Time = last.pos.encode(), last.ev.RecordedAt
		return fn(ctx, sb)
	})
}

// scan reads pages after at, up to the end when it begins.
func (r *Replayer) scan(ctx context.Context, at pos, page func([]row) error) error {
	c := r.cfg
	var horizon string
	if err := r.pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&horizon); err != nil {
		return fmt.Errorf("pgtable: replay: %w", err)
	}
	after := fmt.Sprintf(`(%s, %s) > ($1::text::xid8, $2::bigint) AND %s < $3::text::xid8`, c.cols.txid, c.cols.seq, c.cols.txid)
	var total int64
	if err := r.pool.QueryRow(ctx, `SELECT count(*) FROM `+c.table+` WHERE `+after,
		strconv.FormatUint(at.tx, 10), at.seq, horizon).Scan(&total); err != nil {
		return fmt.Errorf("pgtable: replay: %w", err)
	}
	r.total.Store(total)
	r.read.Store(0)
	q := `SELECT ` + c.fields() + ` FROM ` + c.table + ` WHERE ` + after + fmt.Sprintf(` ORDER BY %s LIMIT %d`, c.order, replayPage)
	var rows []row
	for {
		res, err := r.pool.Query(ctx, q, strconv.FormatUint(at.tx, 10), at.seq, horizon)
		if err != nil {
			return fmt.Errorf("pgtable: replay: %w", err)
		}
		if rows, err = scanRows(res, rows[:0]); err != nil {
			return fmt.Errorf("pgtable: replay: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		r.read.Add(int64(len(rows)))
		at = rows[len(rows)-1].pos
		if err := page(rows); err != nil {
			return err
		}
		if len(rows) < replayPage {
			return nil
		}
	}
}

// Replay reads the table up to its end and calls emit with batches of up
// to BatchSize events from Workers goroutines, an aggregate's events all
// from one of them, in order. The first error stops it. It implements
// projection.Replay.
func (r *Replayer) Replay(ctx context.Context, emit func(context.Context, []aggregate.Event) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	workers, size := r.cfg.Workers, r.cfg.BatchSize
	chans := make([]chan aggregate.Event, workers)
	var wg sync.WaitGroup
	for i := range chans {
		chans[i] = make(chan aggregate.Event, size)
		wg.Go(func() {
			batch := make([]aggregate.Event, 0, size)
			flush := func() {
				if len(batch) > 0 && ctx.Err() == nil {
					if err := emit(ctx, batch); err != nil {
						cancel(err)
					}
				}
				batch = make([]aggregate.Event, 0, size)
			}
			for e := range chans[i] {
				if batch = append(batch, e); len(batch) == size {
					flush()
				}
			}
			flush()
		})
	}
	err := r.scan(ctx, pos{}, func(rows []row) error {
		for i := range rows {
			h := fnv.New32a()
			h.Write([]byte(rows[i].ev.Aggregate))
			select {
			case chans[int(h.Sum32()%uint32(workers))] <- rows[i].ev:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		return nil
	})
	for _, ch := range chans {
		close(ch)
	}
	wg.Wait()
	if cause := context.Cause(ctx); cause != nil && err == nil {
		err = cause
	}
	return err
}
