package effects

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder/inorder/internal/retry"
)

// Config configures a Client. A nil *Config is valid: every field has a
// default.
type Config struct {
	// Schema holds inorder's tables, the effects table among them (see
	// package migrations). Default migrations.DefaultSchema ("inorder").
	Schema string

	// RiverSchema holds River's tables (see MigrateRiver). Default: Schema.
	RiverSchema string

	// Queue is the River queue of effect jobs. Default DefaultQueue.
	Queue string

	// Workers is how many effects a started Client performs at once.
	// Default 10.
	Workers int

	// Timeout bounds each call of Perform and of Reconcile. Default
	// DefaultTimeout (10 s).
	Timeout time.Duration

	// Lease is how long an attempt's claim on its intent lasts, from the
	// claim (and again from the call, after a Reconcile that found the
	// effect not done): an attempt whose claim expired is presumed dead, and
	// the reconciliation pass hands its intent to another. It must exceed
	// Timeout, so that a live attempt's call ends before its claim does.
	// It is also how long a River job may stay running without holding its
	// intent's claim before its executor is presumed dead (see Recovery).
	// Default 2×Timeout.
	Lease time.Duration

	// RescueAfter is River's RescueStuckJobsAfter: River's leader makes a
	// job that has been running this long retryable again (its client is
	// presumed dead), which is how River's own rows of a dead executor are
	// finished. It must be at least River's job timeout (2×Timeout + 5 s).
	// Intents do not wait for it: the reconciliation pass gives them a new
	// job after Lease (see Recovery). Default 2×Timeout + 20 s.
	RescueAfter time.Duration

	// MaxAttempts is how many times River works an intent's job before the
	// intent is Failed. Default 25.
	MaxAttempts int

	// RetryBackoff bounds the delay before the first retry; it doubles with
	// every attempt up to MaxBackoff, with jitter (inorder's one backoff
	// policy: each delay is drawn from [d/2, d]). Default 1 s.
	RetryBackoff time.Duration

	// MaxBackoff caps the delay between retries. Default 1 h.
	MaxBackoff time.Duration

	// ReconcileInterval is how often a started Client runs the
	// reconciliation pass (see Client.ReconcileStuck), which takes up the
	// intents of dead executors. Default DefaultReconcileInterval (5 s).
	ReconcileInterval time.Duration

	// PollInterval is how often River looks for jobs when no notification
	// arrives (River's FetchPollInterval). Default 1 s.
	PollInterval time.Duration

	// Logger receives the Client's logs and River's warnings and errors.
	// Default: discarded.
	Logger *slog.Logger

	// OnAttempt, if set, is called after the outcome of every attempt is
	// recorded (and after the reconciliation pass settles an intent), from
	// the goroutine that ran it. It must be fast and must not block: it is
	// how metrics and tests observe effects.
	OnAttempt func(Attempt)

	// TracerProvider, if set, traces every handler call: a span
	// "inorder.effect" with the effect's kind, key and event, in whose
	// context the handler runs — an HTTP client instrumented with otelhttp
	// (as the ledger's webhook is) makes its request a child of it and
	// sends its traceparent. Default: no spans.
	TracerProvider trace.TracerProvider
}

// Client records intents and performs them. Record is called from
// projection handlers; Start (or Run) works the intents with River, in any
// number of processes at once. A Client is safe for concurrent use.
type Client struct {
	pool        *pgxpool.Pool
	cfg         Config
	log         *slog.Logger
	river       *river.Client[pgx.Tx]
	handlers    map[string]Handler
	reconcilers []string // kinds whose handler implements Reconciler
	sql         statements
	tally       tally       // attempts by kind and outcome, for metrics
	riverSeen   atomic.Bool // River's job table exists (riverReady)

	mu      sync.Mutex
	stopBg  context.CancelFunc // stops the reconciliation loop
	bgDone  chan struct{}
	started bool
}

// Schema returns the schema of the effects table.
func (c *Client) Schema() string { return c.cfg.Schema }

// Kinds returns the kinds the Client has handlers for, sorted.
func (c *Client) Kinds() []string {
	kinds := make([]string, 0, len(c.handlers))
	for k := range c.handlers {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds
}

// lease is how long an attempt's claim lasts.
func (c *Client) lease() time.Duration { return c.cfg.Lease }

// backoff returns the delay before River's next try after attempt attempt
// (1-based).
func (c *Client) backoff(attempt int) time.Duration {
	return retry.Policy{Initial: c.cfg.RetryBackoff, Max: c.cfg.MaxBackoff}.Delay(attempt)
}

func (c *Client) observe(a Attempt) {
	outcome := string(a.State)
	if a.State == Running {
		outcome = "unrecorded"
	}
	c.tally.add(a.Kind, outcome)
	if c.cfg.OnAttempt != nil {
		c.cfg.OnAttempt(a)
	}
}

// Binder is implemented by projections that record intents with a Client
// they are given rather than built with: a binary built on package cli
// constructs its projections before it connects, and hands them the Client
// (Bind) before any of its commands runs a handler.
type Binder interface {
	// UseEffects hands the projection the Client to record intents with.
	UseEffects(c *Client)
}

// Bind gives c to every projection of projections that implements Binder,
// and returns how many did.
func Bind[P any](c *Client, projections ...P) int {
	n := 0
	for _, p := range projections {
		if b, ok := any(p).(Binder); ok {
			b.UseEffects(c)
			n++
		}
	}
	return n
}

// tally counts the attempts this Client made, by kind and outcome, and
// the recoveries its reconciliation passes made, by kind and cause.
type tally struct {
	mu sync.Mutex
	n  map[[2]string]int64 // (kind, outcome) → attempts
	r  map[[2]string]int64 // (kind, cause) → recoveries
}

func (t *tally) recovered(kind, cause string) { t.inc(&t.r, kind, cause) }

func (t *tally) recoveries() map[[2]string]int64 { return t.copyOf(&t.r) }

func (t *tally) add(kind, outcome string) { t.inc(&t.n, kind, outcome) }

func (t *tally) snapshot() map[[2]string]int64 { return t.copyOf(&t.n) }

// inc counts one (a, b) in *m, made on first use.
func (t *tally) inc(m *map[[2]string]int64, a, b string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if *m == nil {
		*m = map[[2]string]int64{}
	}
	(*m)[[2]string{a, b}]++
}

// copyOf returns a copy of *m (t.n or t.r, read under the lock), never nil.
func (t *tally) copyOf(m *map[[2]string]int64) map[[2]string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[[2]string]int64, len(*m))
	for k, v := range *m {
		out[k] = v
	}
	return out
}
