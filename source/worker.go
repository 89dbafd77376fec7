package source

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/projection"
)

// item is a queued delivery, or a flush marker.
type item struct {
	d     *Delivery
	flush chan struct{} // non-nil: a flush marker, closed once what came before is settled
}

// worker processes the deliveries of one partition, in batches. Its queue
// is unbounded: the dispatcher's window bounds what all queues hold.
type worker struct {
	d        *Dispatcher
	id       int
	backoff  retry.Policy
	failures int // consecutive failed batches, for the backoff

	mu   sync.Mutex
	q    []item
	wake chan struct{} // cap 1: something was queued, or the window filled
}

func newWorker(d *Dispatcher, id int) *worker {
	return &worker{
		d: d, id: id, wake: make(chan struct{}, 1),
		backoff: retry.Policy{Initial: d.cfg.MinBackoff, Max: d.cfg.MaxBackoff, MaxElapsed: -1},
	}
}

// push queues it and wakes the worker.
func (w *worker) push(it item) {
	w.mu.Lock()
	w.q = append(w.q, it)
	w.mu.Unlock()
	w.signal()
}

func (w *worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take moves the queued deliveries to pending, up to the first flush
// marker, which it returns (the rest stays queued).
func (w *worker) take(pending []*Delivery) ([]*Delivery, chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, it := range w.q {
		if it.flush != nil {
			clear(w.q[:i+1])
			w.q = w.q[i+1:]
			return pending, it.flush
		}
		pending = append(pending, it.d)
	}
	clear(w.q)
	w.q = w.q[:0]
	return pending, nil
}

// run closes a batch when it is full, when the window is full (nothing more
// can come until a batch commits), when MaxWait has passed since its first
// delivery, or at a flush; otherwise it waits for deliveries, counting the
// time as idle (nothing to process) or filling (a partial batch).
func (w *worker) run(ctx context.Context) {
	d, cfg := w.d, &w.d.cfg
	var pending []*Delivery
	var first time.Time // when pending's oldest delivery was taken
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for ctx.Err() == nil {
		had := len(pending)
		var flush chan struct{}
		pending, flush = w.take(pending)
		if had == 0 && len(pending) > 0 {
			first = time.Now()
		}
		if flush != nil {
			for len(pending) > 0 && ctx.Err() == nil {
				pending = w.process(ctx, pending, CloseFlush)
			}
			if ctx.Err() == nil {
				close(flush)
			}
			continue
		}
		var reason int
		switch {
		case len(pending) == 0:
			reason = -1
		case len(pending) >= cfg.BatchSize:
			reason = CloseFull
		case d.full():
			reason = CloseWindow
		case time.Since(first) >= cfg.MaxWait:
			reason = CloseMaxWait
		default:
			reason = -1
		}
		if reason >= 0 {
			pending = w.process(ctx, pending, reason)
			first = time.Now()
			continue
		}
		var timeout <-chan time.Time
		if len(pending) > 0 {
			timer.Reset(cfg.MaxWait - time.Since(first))
			timeout = timer.C
		}
		began := time.Now()
		select {
		case <-ctx.Done():
		case <-w.wake:
		case <-timeout:
		}
		timer.Stop()
		if waited := int64(time.Since(began)); len(pending) == 0 {
			d.stats.idle.Add(waited)
		} else {
			d.stats.filling.Add(waited)
		}
	}
}

// process runs one batch of at most BatchSize deliveries and returns what is
// left to process: the rest of pending, plus the deliveries of a failed
// batch that their source did not take back.
func (w *worker) process(ctx context.Context, pending []*Delivery, reason int) []*Delivery {
	d := w.d
	n := min(len(pending), d.cfg.BatchSize)
	batch := pending[:n:n]
	rest := pending[n:]
	if w.failures > 0 {
		reason = CloseRetry
	}

	b := projection.Batch{Source: d.cfg.Source, Exclusive: d.cfg.Exclusive}
	for _, del := range batch {
		if del.Reject != nil {
			b.Rejects = append(b.Rejects, projection.Reject{Event: del.Event, Err: del.Reject})
		} else {
			b.Events = append(b.Events, del.Event)
		}
	}
	if d.cfg.Checkpoints != nil {
		b.Checkpoints = d.cfg.Checkpoints(batch)
	}
	if d.cfg.BeforeCommit != nil {
		b.BeforeCommit = func(ctx context.Context, tx pgx.Tx) error { return d.cfg.BeforeCommit(ctx, tx, batch) }
	}
	d.stats.batches.Add(1)
	d.stats.observeBatch(reason, n, d.cfg.BatchSize)
	results, err := d.cfg.Processor.Process(ctx, b)
	if err == nil {
		w.failures = 0
		d.stats.committed.Add(1)
		d.stats.acked.Add(int64(len(batch)))
		for acker, ds := range groupByAcker(batch) {
			if acker != nil {
				acker.Ack(ds)
			}
		}
		d.release(len(batch))
		if d.cfg.AfterCommit != nil {
			d.cfg.AfterCommit(batch, results)
		}
		return rest
	}
	if ctx.Err() != nil {
		return nil // abandoned: nothing committed, nothing settled
	}
	d.stats.failures.Add(1)
	w.failures++
	d.log.WarnContext(ctx, "batch failed", "source", d.cfg.Source, "worker", w.id, "deliveries", len(batch), "error", err)
	var again []*Delivery
	for acker, ds := range groupByAcker(batch) {
		if acker != nil && acker.Nack(ds, err) {
			d.stats.nacked.Add(int64(len(ds)))
			d.release(len(ds))
			continue
		}
		again = append(again, ds...)
	}
	d.stats.retried.Add(int64(len(again)))
	_ = retry.Sleep(ctx, w.backoff.Delay(w.failures))
	return append(again, rest...)
}

// groupByAcker yields the deliveries of batch grouped by Acker, in order of
// each Acker's first delivery (deliveries without an Acker form a group
// with a nil Acker).
func groupByAcker(batch []*Delivery) func(yield func(Acker, []*Delivery) bool) {
	return func(yield func(Acker, []*Delivery) bool) {
		first := batch[0].Acker
		same := true
		for _, del := range batch[1:] {
			if del.Acker != first {
				same = false
				break
			}
		}
		if same {
			yield(first, batch)
			return
		}
		var order []Acker
		groups := map[Acker][]*Delivery{}
		for _, del := range batch {
			if _, ok := groups[del.Acker]; !ok {
				order = append(order, del.Acker)
			}
			groups[del.Acker] = append(groups[del.Acker], del)
		}
		for _, a := range order {
			if !yield(a, groups[a]) {
				return
			}
		}
	}
}
