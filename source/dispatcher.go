package source

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/projection"
)

// Defaults of Config.
const (
	DefaultWorkers    = 4
	DefaultBatchSize  = 500
	DefaultMaxWait    = 50 * time.Millisecond
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// Delivery is one event received from a source, with what the source needs
// to settle it.
type Delivery struct {
	// Event is the delivered event.
	Event aggregate.Event

	// Reject, when non-nil, marks a delivery the source could not turn into
	// a valid event (content that is not JSON, say); it should be an
	// *aggregate.ValidationError. The delivery is recorded in the rejected
	// table (projection.Batch.Rejects) in the batch's transaction instead of
	// being processed, and then acknowledged like any other.
	Reject error

	// Key chooses the worker; default Event.Aggregate. Deliveries with the
	// same key go to the same worker, in dispatch order.
	Key string

	// Acker settles the delivery after its batch's transaction; nil means
	// there is nothing to settle.
	Acker Acker

	// Ticket is the delivery's ticket in the source's Tracker, if any; the
	// dispatcher does not use it (see Config.BeforeCommit).
	Ticket Ticket

	// Handle is the source's own reference to the delivery (the message to
	// acknowledge, say); the dispatcher does not use it.
	Handle any
}

// Acker settles deliveries. A worker calls it from its own goroutine, once per
// batch, with the batch's deliveries that share the Acker, in dispatch order.
type Acker interface {
	// Ack is called once the deliveries' batch has committed: their
	// effects are durable and the source may forget them.
	Ack(ds []*Delivery)

	// Nack is called when the batch failed and nothing was committed. It
	// returns true when the source takes the deliveries back (it will
	// redeliver them), false to have the worker retry them itself, after a
	// backoff, until they commit or the dispatcher stops.
	Nack(ds []*Delivery, err error) (redeliver bool)
}

// Config configures a Dispatcher. Only Processor is required.
type Config struct {
	// Processor processes the batches. Required.
	Processor *projection.Processor

	// Source names the source in the rejected table
	// (projection.Batch.Source).
	Source string

	// Workers is the number of worker goroutines, each with its own
	// batches and transactions. Default 4.
	Workers int

	// BatchSize is the largest number of deliveries in one batch
	// (transaction). Default 500.
	BatchSize int

	// MaxWait is how long a worker waits for a batch to fill after its
	// first delivery arrived. Default 50 ms.
	MaxWait time.Duration

	// QueueSize is how many deliveries each worker's queue holds before
	// Dispatch blocks. Default 2 × BatchSize.
	QueueSize int

	// MinBackoff and MaxBackoff bound the exponential, jittered pause of
	// a worker after a failed batch. Defaults 100 ms and 5 s.
	MinBackoff, MaxBackoff time.Duration

	// BeforeCommit, if set, runs inside each batch's transaction, after the
	// projections' writes and before the commit, with the batch's
	// deliveries (a source writes its checkpoint here). It may run more than
	// once for one batch if the transaction is retried.
	BeforeCommit func(ctx context.Context, tx pgx.Tx, batch []*Delivery) error

	// AfterCommit, if set, is called after each committed batch, after its
	// deliveries were acknowledged, with the processor's results
	// (index-aligned with the batch's deliveries that are not rejects, in
	// order). It runs on the worker's goroutine: it must not block.
	AfterCommit func(batch []*Delivery, results []projection.Result)

	// Logger receives the dispatcher's logs. Default: discarded.
	Logger *slog.Logger
}

// Dispatcher batches deliveries for a processor on partitioned workers. See
// the package documentation.
type Dispatcher struct {
	cfg     Config
	log     *slog.Logger
	workers []*worker
	started atomic.Bool
	done    chan struct{} // closed when Run returns
	stats   struct {
		dispatched, batches, committed, acked, nacked, retried, failures atomic.Int64
	}
}

type item struct {
	d     *Delivery
	flush chan struct{} // non-nil: a flush marker
}

// NewDispatcher returns a dispatcher. Start it with Run.
func NewDispatcher(cfg *Config) (*Dispatcher, error) {
	if cfg == nil || cfg.Processor == nil {
		return nil, errors.New("source: Config.Processor is required")
	}
	c := *cfg
	if c.Workers < 0 || c.BatchSize < 0 || c.MaxWait < 0 || c.QueueSize < 0 || c.MinBackoff < 0 || c.MaxBackoff < 0 {
		return nil, errors.New("source: negative Workers, BatchSize, MaxWait, QueueSize or backoff")
	}
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.MaxWait = cmp.Or(c.MaxWait, DefaultMaxWait)
	c.QueueSize = cmp.Or(c.QueueSize, 2*c.BatchSize)
	c.MinBackoff = cmp.Or(c.MinBackoff, DefaultMinBackoff)
	c.MaxBackoff = max(cmp.Or(c.MaxBackoff, DefaultMaxBackoff), c.MinBackoff)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Dispatcher{cfg: c, log: c.Logger, done: make(chan struct{})}
	for i := range c.Workers {
		d.workers = append(d.workers, &worker{d: d, id: i, ch: make(chan item, c.QueueSize)})
	}
	return d, nil
}

// Run runs the workers until ctx is cancelled, then returns ctx's error.
// Deliveries not settled by then are abandoned: their transactions roll back
// and they are neither acknowledged nor nacked. Call Flush first for a
// graceful stop. Run may be called once.
func (d *Dispatcher) Run(ctx context.Context) error {
	if !d.started.CompareAndSwap(false, true) {
		return errors.New("source: Dispatcher.Run called twice")
	}
	defer close(d.done)
	exited := make(chan struct{})
	for _, w := range d.workers {
		go func() {
			defer func() { exited <- struct{}{} }()
			w.run(ctx)
		}()
	}
	for range d.workers {
		<-exited
	}
	return ctx.Err()
}

// Dispatch queues a delivery on its worker. It blocks while that worker's
// queue is full, until ctx is done or Run has returned (ErrStopped).
func (d *Dispatcher) Dispatch(ctx context.Context, del *Delivery) error {
	key := del.Key
	if key == "" {
		key = del.Event.Aggregate
	}
	w := d.workers[fnv64(key)%uint64(len(d.workers))]
	if d.stopped() {
		return ErrStopped
	}
	select {
	case w.ch <- item{d: del}:
		d.stats.dispatched.Add(1)
		return nil
	case <-ctx.Done():
		return fmt.Errorf("source: dispatch: %w", ctx.Err())
	case <-d.done:
		return ErrStopped
	}
}

// Flush makes every worker process what was dispatched before the call
// without waiting for MaxWait, and returns once all of it is settled
// (acknowledged, or nacked and taken back by its source). Failed batches
// that a source does not take back are retried until they commit, so Flush
// returns early only when ctx is done or Run has returned (ErrStopped).
func (d *Dispatcher) Flush(ctx context.Context) error {
	if d.stopped() {
		return ErrStopped
	}
	marks := make([]chan struct{}, len(d.workers))
	for i, w := range d.workers {
		marks[i] = make(chan struct{})
		select {
		case w.ch <- item{flush: marks[i]}:
		case <-ctx.Done():
			return fmt.Errorf("source: flush: %w", ctx.Err())
		case <-d.done:
			return ErrStopped
		}
	}
	for _, m := range marks {
		select {
		case <-m:
		case <-ctx.Done():
			return fmt.Errorf("source: flush: %w", ctx.Err())
		case <-d.done:
			return ErrStopped
		}
	}
	return nil
}

func (d *Dispatcher) stopped() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// ErrStopped is returned by Flush and Dispatch once Run has returned.
var ErrStopped = errors.New("source: dispatcher stopped")

// Stats are a dispatcher's cumulative counters.
type Stats struct {
	// Dispatched counts deliveries queued by Dispatch.
	Dispatched int64
	// Batches counts Process calls; Committed those that committed.
	Batches, Committed int64
	// Acked and Nacked count deliveries settled either way.
	Acked, Nacked int64
	// Retried counts deliveries a worker retried itself after a failure.
	Retried int64
	// Failures counts failed Process calls.
	Failures int64
}

// Stats returns the dispatcher's counters.
func (d *Dispatcher) Stats() Stats {
	return Stats{
		Dispatched: d.stats.dispatched.Load(),
		Batches:    d.stats.batches.Load(),
		Committed:  d.stats.committed.Load(),
		Acked:      d.stats.acked.Load(),
		Nacked:     d.stats.nacked.Load(),
		Retried:    d.stats.retried.Load(),
		Failures:   d.stats.failures.Load(),
	}
}

type worker struct {
	d        *Dispatcher
	id       int
	ch       chan item
	failures int // consecutive failed batches, for the backoff
}

func (w *worker) run(ctx context.Context) {
	cfg := &w.d.cfg
	var pending []*Delivery
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	armed := false
	// take handles one queue item; it returns false for a flush marker,
	// after processing and settling everything pending.
	take := func(it item) bool {
		if it.flush == nil {
			pending = append(pending, it.d)
			return true
		}
		for len(pending) > 0 && ctx.Err() == nil {
			pending = w.process(ctx, pending)
		}
		if ctx.Err() == nil {
			close(it.flush)
		}
		return false
	}
	for {
		var timeout <-chan time.Time
		if armed {
			timeout = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case it := <-w.ch:
			// Take what is already queued, up to a full batch.
			for take(it) && len(pending) < cfg.BatchSize {
				var more bool
				select {
				case it = <-w.ch:
					more = true
				default:
				}
				if !more {
					break
				}
			}
			if len(pending) >= cfg.BatchSize {
				pending = w.process(ctx, pending)
			}
		case <-timeout:
			armed = false
			if len(pending) > 0 {
				pending = w.process(ctx, pending)
			}
		}
		switch {
		case len(pending) == 0 && armed:
			timer.Stop()
			armed = false
		case len(pending) > 0 && !armed:
			timer.Reset(cfg.MaxWait)
			armed = true
		}
	}
}

// process runs one batch of at most BatchSize deliveries and returns what is
// left to process: the rest of pending, plus the deliveries of a failed
// batch that their source did not take back.
func (w *worker) process(ctx context.Context, pending []*Delivery) []*Delivery {
	d := w.d
	n := min(len(pending), d.cfg.BatchSize)
	batch := pending[:n:n]
	rest := pending[n:]

	b := projection.Batch{Source: d.cfg.Source}
	for _, del := range batch {
		if del.Reject != nil {
			b.Rejects = append(b.Rejects, projection.Reject{Event: del.Event, Err: del.Reject})
		} else {
			b.Events = append(b.Events, del.Event)
		}
	}
	if d.cfg.BeforeCommit != nil {
		b.BeforeCommit = func(ctx context.Context, tx pgx.Tx) error { return d.cfg.BeforeCommit(ctx, tx, batch) }
	}
	d.stats.batches.Add(1)
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
	d.log.WarnContext(ctx, "inorder: batch failed", "source", d.cfg.Source, "worker", w.id, "deliveries", len(batch), "error", err)
	var retry []*Delivery
	for acker, ds := range groupByAcker(batch) {
		if acker != nil && acker.Nack(ds, err) {
			d.stats.nacked.Add(int64(len(ds)))
			continue
		}
		retry = append(retry, ds...)
	}
	d.stats.retried.Add(int64(len(retry)))
	w.sleep(ctx)
	return append(retry, rest...)
}

// sleep pauses after a failed batch: MinBackoff doubled per consecutive
// failure up to MaxBackoff, with jitter.
func (w *worker) sleep(ctx context.Context) {
	cfg := &w.d.cfg
	delay := min(cfg.MinBackoff<<min(w.failures-1, 20), cfg.MaxBackoff)
	delay = delay/2 + rand.N(delay/2+1)
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
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

// fnv64 is FNV-1a, inlined to avoid an allocation per delivery.
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
