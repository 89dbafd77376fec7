package effects

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/inorder/inorder/aggregate"
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

// RelayJobKind is the River job kind of relay jobs: their args carry the
// batch number of the intents they enqueue.
const RelayJobKind = "inorder.effect.relay"

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
