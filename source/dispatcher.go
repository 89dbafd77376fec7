package source

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
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
	// DefaultWindowBatches is how many batches per worker the default
	// MaxInFlight allows: one in a worker's transaction, one filling behind
	// it, and one of headroom for partitions of uneven size.
	DefaultWindowBatches = 3
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
	// dispatcher does not use it (see Config.Checkpoints).
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

	// Exclusive declares that no other dispatcher, in this process or
	// another, delivers this one's aggregates while it runs to a processor
	// of the same projections — the source gives each process its own
	// part of the aggregate space: a Kafka partition whose records are
	// keyed by aggregate, a leased partition of an events table — and that
	// every delivery's Key is its aggregate (the default) or a function of
	// it. Each worker's batches then hold aggregates that no other batch
	// holds at the same time, and the dispatcher says so to the processor
	// (projection.Batch.Exclusive), which takes fewer locks. A wrong
	// declaration (two processes briefly holding one partition in a
	// rebalance) costs at worst a deadlock, retried; never a wrong read
	// model. Sources set it for their users where it holds (package
	// pgtable always; package kafka when the aggregate is the record's
	// key).
	Exclusive bool

	// MaxWait is how long a worker waits for a batch to fill after its
	// first delivery arrived, unless the window is full (see MaxInFlight).
	// Default 50 ms.
	MaxWait time.Duration

	// MaxInFlight is the window: how many deliveries may be dispatched and
	// not yet settled at once, over all workers. Dispatch blocks while it
	// is full, and a full window closes every partial batch at once — no
	// more deliveries can come until one commits, so waiting for MaxWait
	// would only leave workers idle. Default DefaultWindowBatches (3) ×
	// Workers × BatchSize: each worker can commit one batch while the next
	// fills. A source whose server bounds the window itself (a persistent
	// subscription's buffer size) sets it to that bound.
	MaxInFlight int

	// MinBackoff and MaxBackoff bound the exponential, jittered pause of
	// a worker after a failed batch (package internal/retry's policy).
	// Defaults 100 ms and 5 s.
	MinBackoff, MaxBackoff time.Duration

	// Checkpoints, if set, is called before each batch is processed, with
	// its deliveries, and returns the source positions the batch's
	// transaction stores (projection.Batch.Checkpoints): the positions the
	// source may resume from once the batch has committed, such as the low
	// watermark of each partition with the batch's deliveries counted as
	// committed (Tracker.WatermarkWith). They commit or roll back with the
	// batch's effects.
	Checkpoints func(batch []*Delivery) []projection.Checkpoint

	// BeforeCommit, if set, runs inside each batch's transaction, after the
	// projections' writes and before the commit, with the batch's
	// deliveries. It may run more than once for one batch if the
	// transaction is retried. A source that only stores its position uses
	// Checkpoints instead, which needs no statement of its own.
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
	cfg      Config
	log      *slog.Logger
	workers  []*worker
	inFlight atomic.Int64  // deliveries dispatched and not settled
	slots    chan struct{} // one per delivery in flight: the window
	started  atomic.Bool
	done     chan struct{} // closed when Run returns
	stats    dispatcherStats
}

// NewDispatcher returns a dispatcher. Start it with Run.
func NewDispatcher(cfg *Config) (*Dispatcher, error) {
	if cfg == nil || cfg.Processor == nil {
		return nil, errors.New("source: Config.Processor is required")
	}
	c := *cfg
	if c.Workers < 0 || c.BatchSize < 0 || c.MaxWait < 0 || c.MaxInFlight < 0 || c.MinBackoff < 0 || c.MaxBackoff < 0 {
		return nil, errors.New("source: negative Workers, BatchSize, MaxWait, MaxInFlight or backoff")
	}
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.MaxWait = cmp.Or(c.MaxWait, DefaultMaxWait)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, DefaultWindow(c.Workers, c.BatchSize))
	c.MinBackoff = cmp.Or(c.MinBackoff, DefaultMinBackoff)
	c.MaxBackoff = max(cmp.Or(c.MaxBackoff, DefaultMaxBackoff), c.MinBackoff)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Dispatcher{cfg: c, log: c.Logger, done: make(chan struct{}), slots: make(chan struct{}, c.MaxInFlight)}
	for i := range c.Workers {
		d.workers = append(d.workers, newWorker(d, i))
	}
	return d, nil
}

// DefaultWindow is the default MaxInFlight of a dispatcher with the given
// workers and batch size: DefaultWindowBatches × workers × batchSize,
// capped at 1<<20.
func DefaultWindow(workers, batchSize int) int {
	return min(DefaultWindowBatches*max(workers, 1)*max(batchSize, 1), 1<<20)
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

// Dispatch queues a delivery on its worker. It blocks while the window is
// full (MaxInFlight deliveries not settled), until ctx is done or Run has
// returned (ErrStopped).
func (d *Dispatcher) Dispatch(ctx context.Context, del *Delivery) error {
	key := del.Key
	if key == "" {
		key = del.Event.Aggregate
	}
	w := d.workers[workerOf(key, len(d.workers))]
	if d.stopped() {
		return ErrStopped
	}
	select {
	case d.slots <- struct{}{}:
	default:
		// The window is full: partial batches must close now.
		d.kickAll()
		select {
		case d.slots <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("source: dispatch: %w", ctx.Err())
		case <-d.done:
			return ErrStopped
		}
	}
	n := d.inFlight.Add(1)
	d.stats.dispatched.Add(1)
	w.push(item{d: del})
	if n == int64(d.cfg.MaxInFlight) {
		d.kickAll()
	}
	return nil
}

// release frees the window of n settled deliveries.
func (d *Dispatcher) release(n int) {
	d.inFlight.Add(-int64(n))
	for range n {
		<-d.slots
	}
}

// full reports whether the window is full.
func (d *Dispatcher) full() bool { return d.inFlight.Load() >= int64(d.cfg.MaxInFlight) }

// kickAll wakes every worker, to close partial batches.
func (d *Dispatcher) kickAll() {
	for _, w := range d.workers {
		w.signal()
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
		w.push(item{flush: marks[i]})
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

// Stats returns the dispatcher's counters.
func (d *Dispatcher) Stats() Stats {
	st := Stats{
		Dispatched:  d.stats.dispatched.Load(),
		Batches:     d.stats.batches.Load(),
		Committed:   d.stats.committed.Load(),
		Acked:       d.stats.acked.Load(),
		Nacked:      d.stats.nacked.Load(),
		Retried:     d.stats.retried.Load(),
		Failures:    d.stats.failures.Load(),
		InFlight:    int(d.inFlight.Load()),
		MaxInFlight: d.cfg.MaxInFlight,
		BatchSize:   d.cfg.BatchSize,
		FillSum:     float64(d.stats.fillSumMicros.Load()) / 1e6,
		Idle:        time.Duration(d.stats.idle.Load()),
		Filling:     time.Duration(d.stats.filling.Load()),
	}
	for i := range st.Closed {
		st.Closed[i] = d.stats.closed[i].Load()
	}
	for i := range st.Fill {
		st.Fill[i] = d.stats.fill[i].Load()
	}
	return st
}

// ErrStopped is returned by Flush and Dispatch once Run has returned.
var ErrStopped = errors.New("source: dispatcher stopped")

// workerOf returns the index, among n, of the worker of key: the key's
// FNV-1a hash, mixed (MurmurHash3's 64-bit finalizer), scaled to n. Not
// hash % n: FNV-1a's low bits depend only on the low bits of the key's
// bytes, so hash % n agrees with any other partitioning by FNV-1a modulo a
// power of two — with two persistent consumers whose streams the server
// pins by such a hash (esdbtest does), each consumer got the aggregates of
// one of its workers only, and the other stayed idle. Nor its unmixed high
// bits, which split sequential ids unevenly (±15% over 8 workers).
func workerOf(key string, n int) int {
	h := fnv64(key)
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	hi, _ := bits.Mul64(h, uint64(n))
	return int(hi)
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
