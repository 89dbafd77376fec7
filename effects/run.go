package effects

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/inorder/inorder/migrations"
)

// New returns a Client on pool's database for handlers (one per kind).
// Nothing runs until Start or Run; Record works without them.
func New(pool *pgxpool.Pool, cfg *Config, handlers ...Handler) (*Client, error) {
	if pool == nil {
		return nil, errors.New("effects: New needs a pool")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	c := *cfg
	c.Schema = cmp.Or(c.Schema, migrations.DefaultSchema)
	c.RiverSchema = cmp.Or(c.RiverSchema, c.Schema)
	c.Queue = cmp.Or(c.Queue, DefaultQueue)
	c.Workers = cmp.Or(c.Workers, 10)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	c.Lease = cmp.Or(c.Lease, 2*c.Timeout)
	c.RescueAfter = cmp.Or(c.RescueAfter, jobTimeout(c.Timeout)+outcomeTimeout)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, 25)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, time.Second)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, time.Hour)
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, DefaultReconcileInterval)
	c.PollInterval = cmp.Or(c.PollInterval, time.Second)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Workers < 0 || c.Timeout < 0 || c.Lease < 0 || c.RescueAfter < 0 || c.MaxAttempts < 0 || c.RetryBackoff < 0 ||
		c.MaxBackoff < 0 || c.ReconcileInterval < 0 || c.PollInterval < 0 {
		return nil, errors.New("effects: Config has a negative setting")
	}
	if c.Lease <= c.Timeout {
		return nil, fmt.Errorf("effects: Config.Lease (%s) must exceed Config.Timeout (%s): a live attempt's call must end before its claim", c.Lease, c.Timeout)
	}
	if c.RescueAfter < jobTimeout(c.Timeout) {
		return nil, fmt.Errorf("effects: Config.RescueAfter (%s) must be at least River's job timeout, 2×Timeout + 5 s (%s)", c.RescueAfter, jobTimeout(c.Timeout))
	}
	cl := &Client{
		pool:     pool,
		cfg:      c,
		log:      c.Logger,
		handlers: map[string]Handler{},
		sql:      newStatements(c.Schema, c.RiverSchema),
	}
	for _, h := range handlers {
		k := h.Kind()
		if k == "" {
			return nil, errors.New("effects: a handler has an empty kind")
		}
		if _, dup := cl.handlers[k]; dup {
			return nil, fmt.Errorf("effects: two handlers of kind %q", k)
		}
		cl.handlers[k] = h
		if _, ok := h.(Reconciler); ok {
			cl.reconcilers = append(cl.reconcilers, k)
		}
	}
	slices.Sort(cl.reconcilers)
	if cl.reconcilers == nil {
		cl.reconcilers = []string{}
	}
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &worker{c: cl}); err != nil {
		return nil, fmt.Errorf("effects: register River worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &relayWorker{c: cl}); err != nil {
		return nil, fmt.Errorf("effects: register River worker: %w", err)
	}
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema: c.RiverSchema,
		// River's own warnings and errors only: its info lines (clients,
		// producers, leaders starting) are noise in inorder's logs.
		Logger:            slog.New(minLevel{Handler: c.Logger.Handler(), min: slog.LevelWarn}),
		Workers:           workers,
		Queues:            map[string]river.QueueConfig{c.Queue: {MaxWorkers: c.Workers}},
		MaxAttempts:       c.MaxAttempts,
		FetchPollInterval: c.PollInterval,
		FetchCooldown:     min(c.PollInterval, river.FetchCooldownDefault),
		// Attempts bound themselves (Timeout for Reconcile, Timeout for
		// Perform); River's own timeout is a backstop past both. River's
		// rescuer takes the jobs of dead clients after RescueAfter (see
		// Recovery).
		JobTimeout:           jobTimeout(c.Timeout),
		RescueStuckJobsAfter: c.RescueAfter,
	})
	if err != nil {
		return nil, fmt.Errorf("effects: River client: %w", err)
	}
	cl.river = rc
	return cl, nil
}

// minLevel is a handler that drops records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return minLevel{Handler: h.Handler.WithAttrs(attrs), min: h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}

// Start starts working intents: River's workers on Config.Queue (and River's
// maintenance services) and the reconciliation pass every
// Config.ReconcileInterval. It returns once they run; Stop stops them.
// Cancelling ctx stops them too, as Stop would.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("effects: client already started")
	}
	if err := c.river.Start(ctx); err != nil {
		return fmt.Errorf("effects: start River: %w", err)
	}
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	c.stopBg, c.bgDone, c.started = stop, make(chan struct{}), true
	go c.reconcileLoop(ctx, bg, c.bgDone)
	return nil
}

// Stop stops working intents: no new attempt starts, and the attempts under
// way finish (their outcomes are recorded) unless ctx ends first — then
// their contexts are cancelled, and the intents they held are taken up
// again once their claims expire. It returns when every worker returned.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		return nil
	}
	c.started = false
	c.stopBg()
	<-c.bgDone
	err := c.river.Stop(ctx)
	if err != nil && ctx.Err() != nil {
		// Soft stop timed out: cancel the attempts still running.
		err = errors.Join(err, c.river.StopAndCancel(context.WithoutCancel(ctx)))
	}
	if err != nil {
		return fmt.Errorf("effects: stop: %w", err)
	}
	return nil
}

// Run starts the Client, works intents until ctx is done, then stops it,
// giving the attempts under way up to drain to finish. It returns nil after a
// clean stop.
func (c *Client) Run(ctx context.Context, drain time.Duration) error {
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	return c.Stop(sctx)
}

// reconcileLoop runs ReconcileStuck every Config.ReconcileInterval until bg
// is done or ctx (Start's) is.
func (c *Client) reconcileLoop(ctx, bg context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(c.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-bg.Done():
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := c.ReconcileStuck(bg); err != nil && bg.Err() == nil {
			c.log.WarnContext(bg, "effects reconciliation pass failed", "error", err)
		}
	}
}

// Reconciled reports what a reconciliation pass did.
type Reconciled struct {
	// Requeued counts intents whose executor died (see Recovery), handed
	// back to River with a new job; Causes splits them by cause
	// (RecoveredClaimExpired, RecoveredJobDied, RecoveredRelayDied). Their
	// next attempt asks Reconcile first if their last outcome is uncertain
	// and their handler can.
	Requeued int            `json:"requeued"`
	Causes   map[string]int `json:"causes,omitempty"`
	// Checked counts failed intents with an uncertain last outcome whose
	// handler's Reconcile was asked; Done counts those it found done
	// (settled as Done), NotDone those it did not (now known not applied:
	// they stay Failed, for Retry or Cancel).
	Checked int `json:"checked"`
	Done    int `json:"done"`
	NotDone int `json:"not_done"`
}

// ReconcileStuck is the reconciliation pass; a started Client runs it every
// Config.ReconcileInterval, and any number of processes may run it at once.
// It gives the intents whose executor died a new River job (see Recovery),
// and asks Reconcile about failed intents whose last outcome is uncertain,
// so that an effect the remote side did apply is not left failed.
func (c *Client) ReconcileStuck(ctx context.Context) (Reconciled, error) {
	var r Reconciled
	// The pass asks about an intent once: those it settles get a later
	// updated_at than this (the database's clock, as updated_at's).
	var began time.Time
	if err := c.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&began); err != nil {
		return r, fmt.Errorf("effects: reconciliation pass: %w", err)
	}
	// A pass that died holding failed intents: back to failed.
	for {
		rows, err := c.pool.Query(ctx, c.sql.failStuck, reconcileBatch)
		if err != nil {
			return r, fmt.Errorf("effects: release intents of a dead reconciliation pass: %w", err)
		}
		var k, kind string
		n, err := pgx.ForEachRow(rows, []any{&k, &kind}, func() error {
			c.tally.recovered(kind, RecoveredClaimExpired)
			return nil
		})
		if err != nil {
			return r, fmt.Errorf("effects: release intents of a dead reconciliation pass: %w", err)
		}
		if n.RowsAffected() < reconcileBatch {
			break
		}
	}
	for {
		by, n, err := c.recoverOrphans(ctx)
		if err != nil {
			return r, err
		}
		r.Requeued += n
		for cause, k := range by {
			if r.Causes == nil {
				r.Causes = map[string]int{}
			}
			r.Causes[cause] += k
		}
		if n < reconcileBatch {
			break
		}
	}
	if len(c.reconcilers) == 0 {
		return r, nil
	}
	for {
		rows, err := c.pool.Query(ctx, c.sql.claimFailed, c.reconcilers, c.lease(), reconcileBatch, began)
		if err != nil {
			return r, fmt.Errorf("effects: claim failed intents: %w", err)
		}
		type claimed struct {
			e     Effect
			claim int64
		}
		var batch []claimed
		for rows.Next() {
			var cl claimed
			if err := scanEffect(rows, &cl.e, &cl.claim); err != nil {
				rows.Close()
				return r, fmt.Errorf("effects: claim failed intents: %w", err)
			}
			batch = append(batch, cl)
		}
		if err := rows.Err(); err != nil {
			return r, fmt.Errorf("effects: claim failed intents: %w", err)
		}
		for _, cl := range batch {
			start := time.Now()
			e := cl.e
			done, rerr := c.askReconcile(ctx, c.handlers[e.Kind].(Reconciler), &e)
			a := Attempt{Key: e.Key, Kind: e.Kind, Number: e.Attempts, Reconciled: true, State: Failed, Err: rerr}
			uncertain, msg := true, e.LastError
			switch {
			case rerr != nil:
				msg = "reconcile: " + rerr.Error()
			case done:
				a.State, uncertain, msg = Done, false, ""
				r.Done++
			default:
				uncertain = false
				r.NotDone++
			}
			r.Checked++
			octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outcomeTimeout)
			_, err := c.pool.Exec(octx, c.sql.settle, e.Key, cl.claim, string(a.State), uncertain, nullable(msg))
			cancel()
			if err != nil {
				return r, fmt.Errorf("effects: record reconciliation of %s: %w", e.Key, err)
			}
			a.Duration = time.Since(start)
			c.observe(a)
		}
		if len(batch) < reconcileBatch {
			return r, nil
		}
	}
}
