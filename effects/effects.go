package effects

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"go.opentelemetry.io/otel/trace"

	"github.com/inorder/inorder/aggregate"
	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/migrations"
)

// Defaults of Config.
const (
	// DefaultTimeout is the default of Config.Timeout: what a payment
	// webhook's receiver is expected to answer within.
	DefaultTimeout = 10 * time.Second
	// DefaultReconcileInterval is the default of Config.ReconcileInterval.
	DefaultReconcileInterval = 5 * time.Second
)

// DefaultQueue is the River queue effect jobs go to when Config.Queue is
// empty.
const DefaultQueue = "inorder_effects"

// JobKind is the River job kind of effect jobs: one kind for every effect,
// whose args carry the intent's key (and its effect kind, for River's UI).
const JobKind = "inorder.effect"

// Sentinel errors; the functions that return them wrap them.
var (
	// ErrNotFound reports an intent key with no row.
	ErrNotFound = errors.New("effects: no such intent")

	// ErrUnknownKind reports an intent of a kind no Handler of the Client
	// performs. Record refuses it rather than store an intent nothing will
	// execute.
	ErrUnknownKind = errors.New("effects: no handler for this effect kind")
)

// State is where an intent stands.
type State string

// The states of an intent. Pending, Running and Retrying are open; Done and
// Cancelled are final; Failed waits for an operator.
const (
	// Pending: recorded, not tried yet.
	Pending State = "pending"
	// Running: an attempt holds the intent's claim (until its lease ends).
	Running State = "running"
	// Retrying: the last attempt failed; River tries again after a backoff.
	Retrying State = "retrying"
	// Done: the remote side has it, by a successful call or a Reconcile
	// that found it done.
	Done State = "done"
	// Failed: a permanent error (see Permanent), or the attempts ran out.
	// Nothing retries it until an operator calls Client.Retry; Client.Cancel
	// gives up on it.
	Failed State = "failed"
	// Cancelled: an operator gave up on it; it is never executed again.
	Cancelled State = "cancelled"
)

// States lists every state, open ones first.
var States = []State{Pending, Running, Retrying, Failed, Done, Cancelled}

// Intent is an external effect a projection's handler asks for, recorded
// with Client.Record in the transaction that applies Event.
type Intent struct {
	// Kind names the effect ("payment.settled.webhook"); a Handler of the
	// same Kind performs it. Required.
	Kind string
	// Event is the fact that causes the effect. Its stable id (the
	// source's id, or "<aggregate>:<version>") is part of the key.
	Event aggregate.Event
	// Discriminator tells apart several effects of one Kind caused by one
	// event (one e-mail per recipient, say): it is part of the key. Empty by
	// default.
	Discriminator string
	// Salt is part of the key, empty by default. Leave it empty: then a
	// rebuild, which replays the same facts, records nothing new and sends
	// nothing again. Set it to send an already effected fact's effect once
	// more on purpose — a new salt (a campaign id, a "resend-2025-05" tag,
	// a rebuild generation if every generation must notify) gives every
	// fact a new key, executed once per salt.
	Salt string
	// Args are the effect's arguments, stored as JSON and handed to the
	// Handler. Nil stores JSON null.
	Args any
}

// Key returns the intent's idempotency key as recorded by projection: a
// name-based UUID (version 8: SHA-256 over the projection name, the event's
// stable id, the kind, the discriminator and the salt), in its canonical
// text form. It never depends on an attempt, a time or a random number, so
// every delivery, replay and rebuild of the fact yields the same key; pass
// it to the remote side (an Idempotency-Key header, a message id, a ledger
// reference). Remote sides that expect a UUID as idempotency key take it as
// it is.
func (i Intent) Key(projection string) string {
	return key(projection, i.Event.StableID(), i.Kind, i.Discriminator, i.Salt)
}

// keySpace is the UUID namespace of intent keys.
var keySpace = uuid.MustParse("6f1d3c2a-9b8e-4f57-a0c4-2e5d7b9a1c30")

func key(fields ...string) string {
	k, _ := keyOf(nil, fields...)
	return uuid.UUID(k).String()
}

// keyOf returns the key of fields (projection, stable id, kind,
// discriminator, salt) as bytes: uuid.NewHash(sha256.New(), keySpace,
// data, 8) over the length-prefixed fields, without its allocations. buf is
// scratch space, returned for the next call.
func keyOf(buf []byte, fields ...string) ([16]byte, []byte) {
	buf = append(buf[:0], keySpace[:]...)
	for _, f := range fields {
		// Length-prefixed, so no two field lists hash the same input.
		buf = binary.AppendUvarint(buf, uint64(len(f)))
		buf = append(buf, f...)
	}
	sum := sha256.Sum256(buf)
	var k [16]byte
	copy(k[:], sum[:16])
	k[6] = (k[6] & 0x0f) | 8<<4 // version 8
	k[8] = (k[8] & 0x3f) | 0x80 // RFC 4122 variant
	return k, buf
}

// validKey reports whether s has the form of a key.
func validKey(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}

// Effect is a recorded intent: what handlers receive and operators see.
type Effect struct {
	// Key is the idempotency key (see Intent.Key).
	Key string `json:"key"`
	// Projection, Kind, EventID, Aggregate, Version, Discriminator and Salt
	// are what the key was derived from.
	Projection    string `json:"projection"`
	Kind          string `json:"kind"`
	EventID       string `json:"event_id"`
	Aggregate     string `json:"aggregate"`
	Version       int64  `json:"version"`
	Discriminator string `json:"discriminator,omitempty"`
	Salt          string `json:"salt,omitempty"`
	// Args are the intent's arguments, as JSON.
	Args json.RawMessage `json:"args"`
	// State is where the intent stands.
	State State `json:"state"`
	// Uncertain is true when an attempt called the remote side and its
	// outcome is unknown (a timeout, an error, a crash); the next attempt
	// asks Reconcile first, if the handler has it.
	Uncertain bool `json:"uncertain"`
	// Attempts counts the calls of Perform so far, the current one
	// included (a Handler sees 1 on its first call).
	Attempts int `json:"attempts"`
	// LeaseUntil is when a Running intent's claim expires (an attempt that
	// holds it longer is presumed dead); zero otherwise.
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// JobID is the River job of the last claim; zero before any, and
	// while the reconciliation pass holds it (a failed intent it asks
	// Reconcile about).
	JobID int64 `json:"job_id,omitempty"`
	// Recoveries counts the times the reconciliation pass took the intent
	// up after its executor died (see Recovery).
	Recoveries int `json:"recoveries"`
	// Orphaned is true when the intent's executor died and no River job
	// will take it up: the next reconciliation pass gives it one. Computed
	// by List and Get from River's job table.
	Orphaned bool `json:"orphaned"`
	// LastError is the last attempt's error (or an operator's reason).
	LastError string `json:"last_error,omitempty"`
	// CreatedAt is when the intent was recorded, UpdatedAt when its row
	// last changed, DoneAt when it became Done.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	DoneAt    time.Time `json:"done_at,omitzero"`
}

// Handler performs the effects of one kind. Perform is called after the
// intent's transaction committed, from River's workers, at least once per
// intent and — unless it fails — until it succeeds or fails permanently; two
// attempts of one intent never run at once (while the claim's lease holds).
//
// Perform must pass e.Key to the remote side as its idempotency key, and
// must respect ctx: it ends after Config.Timeout. It returns nil once the
// remote side has the effect, an error wrapped with Permanent when the
// remote side refused it for good (a 4xx that a retry cannot change), and
// any other error when a retry may help. Any error but a permanent one
// leaves the outcome uncertain: the remote side may have applied the effect
// before the error (a timeout, a 5xx, a lost connection).
type Handler interface {
	// Kind is the effect kind the handler performs.
	Kind() string
	// Perform performs e, passing e.Key to the remote side.
	Perform(ctx context.Context, e *Effect) error
}

// Reconciler is implemented by a Handler that can ask the remote side
// whether it has an effect. Reconcile is called before any attempt that
// follows one whose outcome is uncertain (a crash after the call, a timeout,
// an error), and by the reconciliation pass for failed intents whose last
// outcome is uncertain. done=true settles the intent as Done without calling
// Perform again; done=false with a nil error means the remote side does not
// have it, and Perform is called (again, with the same key); an error is a
// failed attempt.
//
// A remote side without idempotency keys needs Reconcile: it is the only
// thing that prevents a second call after an uncertain one.
type Reconciler interface {
	// Reconcile reports whether the remote side has e (by e.Key).
	Reconcile(ctx context.Context, e *Effect) (done bool, err error)
}

// HandlerFunc returns a Handler of kind that calls perform.
func HandlerFunc(kind string, perform func(ctx context.Context, e *Effect) error) Handler {
	return handlerFunc{kind: kind, perform: perform}
}

type handlerFunc struct {
	kind    string
	perform func(ctx context.Context, e *Effect) error
}

func (h handlerFunc) Kind() string                                 { return h.kind }
func (h handlerFunc) Perform(ctx context.Context, e *Effect) error { return h.perform(ctx, e) }

// PermanentError marks an error after which retrying an effect is useless:
// the intent is Failed at once and stays listed for an operator. Build it
// with Permanent.
type PermanentError struct {
	// Err is the cause.
	Err error
}

// Error implements error.
func (p *PermanentError) Error() string { return "permanent: " + p.Err.Error() }

// Unwrap returns the wrapped error.
func (p *PermanentError) Unwrap() error { return p.Err }

// Permanent wraps err so that the attempt that returns it fails the intent
// for good instead of retrying. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err is or wraps a PermanentError.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// Attempt describes the outcome of one attempt at an intent, for
// Config.OnAttempt.
type Attempt struct {
	// Key and Kind identify the intent.
	Key  string
	Kind string
	// Number is the intent's Attempts after this one.
	Number int
	// Called is true when Perform was called (false when Reconcile settled
	// it, or the attempt failed before calling).
	Called bool
	// Reconciled is true when Reconcile was asked first.
	Reconciled bool
	// State is the intent's state after the attempt: Done, Retrying or
	// Failed (or Running, if the outcome could not be recorded).
	State State
	// Err is the attempt's error; nil when it is Done.
	Err error
	// Duration is the wall time of the attempt.
	Duration time.Duration
}

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
