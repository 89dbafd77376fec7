package pgtable

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inorder/inorder/source"
	"github.com/inorder/inorder/source/internal/sourceutil"
)

// maxLagCount caps the rows a lag measurement counts per partition.
const maxLagCount = 1_000_000

// Lag returns the last lag measured (Run measures it every LagEvery).
func (s *Source) Lag() source.Lag {
	s.lagMu.Lock()
	defer s.lagMu.Unlock()
	return s.lag
}

// MeasureLag measures the lag now, with or without Run: the rows of every
// partition after its committed position (or, for a partition this process
// holds, after what it committed since), committed or not yet visible to
// readers, and the age of the oldest by the table's Time column (0 without
// one). Counts above a million per partition are capped.
func (s *Source) MeasureLag(ctx context.Context) (source.Lag, error) {
	l, err := s.measure(ctx)
	return sourceutil.Keep(&s.lagMu, &s.lag, l, err, func(last *source.Lag, err error) { last.Err = err.Error() }), err
}

func (s *Source) measure(ctx context.Context) (source.Lag, error) {
	c := s.cfg
	timeExpr := "0::float8"
	if c.cols.time != "" {
		timeExpr = "coalesce(extract(epoch FROM clock_timestamp() - min(t)), 0)::float8"
	}
	tcol := "NULL::timestamptz"
	if c.cols.time != "" {
		tcol = c.cols.time
	}
	where := fmt.Sprintf(`(%s, %s) > ($1::text::xid8, $2::bigint)`, c.cols.txid, c.cols.seq)
	if c.Partitions > 1 {
		where = c.cols.part + ` = $3 AND ` + where
	}
	sql := fmt.Sprintf(`SELECT count(*), %s FROM (SELECT %s AS t FROM %s WHERE %s LIMIT %d) x`, timeExpr, tcol, c.table, where, maxLagCount)
	l := source.Lag{Source: c.Name, Known: true, MeasuredAt: time.Now()}
	for k := range c.Partitions {
		at, err := s.committed(ctx, k)
		if err != nil {
			return l, err
		}
		args := []any{strconv.FormatUint(at.tx, 10), at.seq}
		if c.Partitions > 1 {
			args = append(args, k)
		}
		var n int64
		var age float64
		if err := s.pool.QueryRow(ctx, sql, args...).Scan(&n, &age); err != nil {
			return l, fmt.Errorf("pgtable: lag: %w", err)
		}
		l.Events += n
		if d := time.Duration(age * float64(time.Second)); n > 0 && d > l.Behind {
			l.Behind = d
		}
	}
	if l.Events > 0 && l.Behind <= 0 && c.cols.time != "" {
		l.Behind = time.Nanosecond // behind, by less than the clock tells
	}
	l.BehindSeconds = l.Behind.Seconds()
	return l, nil
}

// committed returns partition k's committed position: its checkpoint, or
// the watermark of this process's reader if it holds k and got further.
func (s *Source) committed(ctx context.Context, k int) (pos, error) {
	var at pos
	raw, ok, err := s.cfg.Processor.LoadCheckpoint(ctx, s.checkpointName(k))
	if err != nil {
		return at, err
	}
	if ok {
		if at, err = decodePos(raw); err != nil {
			return at, err
		}
	}
	s.mu.Lock()
	p := s.parts[k]
	s.mu.Unlock()
	if p != nil {
		if wm, ok := p.tracker.Watermark(); ok && at.less(wm) {
			at = wm
		}
	}
	return at, nil
}

// RegisterMetrics registers the source's collectors on reg, labelled
// source=<Config.Name>: those every source shares (source.NewCollector:
// the dispatcher's window and batches, inorder_source_lag_events and
// inorder_source_lag_seconds) and
//
//	inorder_source_read_total              rows read from the table
//	inorder_source_partitions_held         partitions this process holds
//	inorder_source_lease_changes_total     partitions taken and given up
//	inorder_source_reconnects_total        lease connections made again
//	inorder_source_horizon_blocked_seconds age of the transaction holding
//	                                       back the snapshot horizon while
//	                                       events wait behind it (0: none)
func (s *Source) RegisterMetrics(reg prometheus.Registerer) error {
	c := source.NewCollector(s.cfg.Name, s.disp, s.Lag,
		source.Counter{Name: "source_read_total", Help: "Rows read from the events table.", Value: func() float64 { return float64(s.stats.read.Load()) }},
		source.Counter{Name: "source_lease_changes_total", Help: "Partition leases taken and given up by this process.", Value: func() float64 {
			return float64(s.stats.leases.Load() + s.stats.released.Load())
		}},
		source.Counter{Name: "source_reconnects_total", Help: "Lease connections made again after one was lost.", Value: func() float64 { return float64(s.stats.reconnects.Load()) }},
	)
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "inorder_source_partitions_held", Help: "Partitions of the events table this process holds and reads.",
		ConstLabels: prometheus.Labels{"source": s.cfg.Name}}, func() float64 { return float64(s.held()) })
	h := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "inorder_source_horizon_blocked_seconds",
		Help:        "Age of the transaction that holds back the snapshot horizon while committed events wait behind it (see the log for its pid); 0 when none.",
		ConstLabels: prometheus.Labels{"source": s.cfg.Name}}, func() float64 {
		if b, ok := s.Blocker(); ok {
			return b.AgeSeconds
		}
		return 0
	})
	return sourceutil.Register(reg, "pgtable", c, g, h)
}

var _ source.Feed = (*Source)(nil)
