package projection

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinel errors of the processor and its operator functions.
var (
	// ErrUnknownProjection reports a projection name the processor does not
	// have.
	ErrUnknownProjection = errors.New("unknown projection")
	// ErrNotQuarantined reports an operator action on an aggregate that has
	// no quarantined event.
	ErrNotQuarantined = errors.New("aggregate is not quarantined")
	// ErrQuarantined reports an action that needs the aggregate not to be
	// quarantined (declaring a gap).
	ErrQuarantined = errors.New("aggregate is quarantined")
	// ErrBadGap reports a gap declaration that does not fit the aggregate's
	// state: it must start right after the applied version and must not cover
	// a parked version.
	ErrBadGap = errors.New("invalid gap")
	// ErrNotFound reports an operator record (rejected event, …) that does
	// not exist.
	ErrNotFound = errors.New("not found")
)

// HandlerError reports that a projection's handler failed on an event. The
// operator functions return it when a retried quarantined event fails again.
type HandlerError struct {
	Projection string
	Aggregate  string
	Version    int64
	Err        error
}

// Error implements error.
func (e *HandlerError) Error() string {
	return fmt.Sprintf("projection %s: aggregate %s version %d: %v", e.Projection, e.Aggregate, e.Version, e.Err)
}

// Unwrap returns the handler's error.
func (e *HandlerError) Unwrap() error { return e.Err }

// UnstorableError reports a delivery that the database refused to store
// for a projection — a value PostgreSQL cannot hold, such as a key over an
// index's size limit, that envelope validation did not catch. The processor
// records the delivery as rejected (reason "unstorable", see
// Processor.Rejected) and it is the Result.Err of its outcome Rejected; the
// rest of the batch commits.
type UnstorableError struct {
	Projection string
	Aggregate  string
	Version    int64
	// Err is the database's error.
	Err error
}

// Error implements error.
func (e *UnstorableError) Error() string {
	agg, _ := escapeText(e.Aggregate)
	return fmt.Sprintf("projection %s: aggregate %s version %d cannot be stored: %v", e.Projection, agg, e.Version, e.Err)
}

// Unwrap returns the database's error.
func (e *UnstorableError) Unwrap() error { return e.Err }

// IsTransient reports whether err is a failure that retrying the whole
// transaction can cure: serialization failures, deadlocks, lock timeouts,
// lost or refused connections and server shutdowns. Context cancellation is
// not transient.
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var lost *connLost
	if errors.As(err, &lost) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300", "53400":
			return true
		}
		return len(pgErr.Code) == 5 && pgErr.Code[:2] == "08"
	}
	if pgconn.SafeToRetry(err) || pgconn.Timeout(err) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var connErr *pgconn.ConnectError
	return errors.As(err, &connErr)
}
