package projection

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"

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

// StatementError is the error of a statement a handler queued (Tx.Queue):
// the database's error, with the statement's text.
type StatementError struct {
	// SQL is the statement as queued.
	SQL string
	// Err is the database's error (a *pgconn.PgError, say).
	Err error
}

// Error implements error.
func (e *StatementError) Error() string {
	return fmt.Sprintf("statement %q: %v", firstLine(e.SQL, 120), e.Err)
}

// Unwrap returns the database's error.
func (e *StatementError) Unwrap() error { return e.Err }

// firstLine returns the first line of sql, at most n bytes of it.
func firstLine(sql string, n int) string {
	sql = strings.TrimSpace(sql)
	if i := strings.IndexByte(sql, '\n'); i >= 0 {
		sql = sql[:i] + " …"
	}
	if len(sql) > n {
		sql = sql[:n] + "…"
	}
	return sql
}

// deadlock is what the processor logs of a deadlock it retries.
type deadlock struct {
	table     string // the relation PostgreSQL names, if any
	statement string // the handler's statement, if it was one
	detail    string // PostgreSQL's detail: the processes and locks
}

// asDeadlock reports whether err is a deadlock (SQLSTATE 40P01) and what
// it names: the relation comes from the error's context ("while updating
// tuple (0,5) in relation \"hot\""), its table name field, or the lock in
// its detail ("relation 16384 of database 5").
func asDeadlock(err error) (deadlock, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
		return deadlock{}, false
	}
	d := deadlock{table: pgErr.TableName, detail: pgErr.Detail}
	if d.table == "" {
		for _, s := range []string{pgErr.Where, pgErr.Detail} {
			if m := relationName.FindStringSubmatch(s); m != nil {
				d.table = m[1] + m[2]
				break
			}
		}
	}
	var se *StatementError
	if errors.As(err, &se) {
		d.statement = firstLine(se.SQL, 200)
	}
	return d, true
}

// relationName finds the relation in a deadlock's context or detail: by
// name, or by OID.
var relationName = regexp.MustCompile(`relation (?:"([^"]+)"|(\d+) of database)`)

// connLost marks the error of an attempt whose connection closed under it:
// transient, whatever the error itself says.
type connLost struct{ err error }

func (c *connLost) Error() string { return "connection lost: " + c.err.Error() }
func (c *connLost) Unwrap() error { return c.err }
