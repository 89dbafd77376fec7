package effects

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// worker is the River worker of effect jobs.
type worker struct {
	river.WorkerDefaults[jobArgs]
	c *Client
}

// Work performs one attempt at the job's intent.
func (w *worker) Work(ctx context.Context, job *river.Job[jobArgs]) error {
	if _, ok := w.c.handlers[job.Args.Effect]; !ok {
		// Record refuses unknown kinds, so a binary with other handlers
		// recorded it; leave the intent alone and let River retry.
		return fmt.Errorf("effects: %s: %w in this worker", job.Args.Effect, ErrUnknownKind)
	}
	return w.c.work(ctx, job.Args.Key, job.ID, job.Attempt >= job.MaxAttempts)
}

// NextRetry is the Client's backoff (Config.RetryBackoff, MaxBackoff).
func (w *worker) NextRetry(job *river.Job[jobArgs]) time.Time {
	return time.Now().Add(w.c.backoff(job.Attempt))
}

// outcomeTimeout bounds the recording of an attempt's outcome, which runs
// even when the job's context is done (the remote call happened).
const outcomeTimeout = 15 * time.Second

// work is one attempt at an intent, for the River job jobID (last: River
// will not try it again after this one):
//
//  1. claim the intent (one statement, committed): it must be pending,
//     retrying, or running with an expired lease; the claim counts the
//     attempt and marks the outcome uncertain before anything is called —
//     unless Reconcile must be asked first;
//  2. ask Reconcile if the last outcome is uncertain and the handler can;
//     if the remote side has it, the intent is done;
//  3. call Perform with the key;
//  4. record the outcome, if the claim is still this attempt's.
//
// A job whose intent is done, failed or cancelled completes without calling
// anything: River's jobs are only wake-ups, the effects table decides.
func (c *Client) work(ctx context.Context, key string, jobID int64, last bool) error {
	began := time.Now()
	var e Effect
	var claim int64
	var reconcile bool
	err := scanEffect(c.pool.QueryRow(ctx, c.sql.claim, key, c.lease(), jobID, c.reconcilers), &e, &claim, &reconcile)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return c.unclaimed(ctx, key)
	case err != nil:
		return fmt.Errorf("effects: claim %s: %w", key, err)
	}
	// The intent's attempts count too: a job that River rescued, or that
	// recovery added, starts its own count, the intent does not.
	last = last || e.Attempts >= c.cfg.MaxAttempts
	log := c.log.With("effect", e.Kind, "key", key, "job", jobID)
	h := c.handlers[e.Kind]
	a := Attempt{Key: key, Kind: e.Kind, Number: e.Attempts}
	finish := func(state State, uncertain bool, cause error) error {
		a.State, a.Err, a.Duration = state, cause, time.Since(began)
		msg := ""
		if cause != nil {
			msg = cause.Error()
		}
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), outcomeTimeout)
		defer cancel()
		tag, err := c.pool.Exec(octx, c.sql.settle, key, claim, string(state), uncertain, nullable(msg))
		switch {
		case err != nil:
			// The outcome is lost; the claim's lease will expire and the
			// next attempt reconciles (the intent is uncertain).
			a.State = Running
			c.observe(a)
			return fmt.Errorf("effects: record outcome of %s: %w", key, err)
		case tag.RowsAffected() == 0:
			log.WarnContext(ctx, "effect attempt lost its claim before recording its outcome", "outcome", state)
			a.State = Running
			c.observe(a)
			return nil
		}
		c.observe(a)
		return nil
	}
	if reconcile {
		a.Reconciled = true
		done, err := c.askReconcile(ctx, h.(Reconciler), &e)
		switch {
		case err != nil:
			err = fmt.Errorf("reconcile: %w", err)
			log.WarnContext(ctx, "effect reconcile failed", "error", err)
			if ferr := finish(retryState(last), true, err); ferr != nil {
				return ferr
			}
			return err
		case done:
			log.InfoContext(ctx, "effect found done by reconcile")
			return finish(Done, false, nil)
		}
		if err := c.pool.QueryRow(ctx, c.sql.start, key, claim, c.lease()).Scan(&e.Attempts); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return nil // lost the claim
			}
			return fmt.Errorf("effects: start attempt of %s: %w", key, err)
		}
		a.Number = e.Attempts
		last = last || e.Attempts >= c.cfg.MaxAttempts
	}
	a.Called = true
	err = c.perform(ctx, h, &e)
	switch {
	case err == nil:
		return finish(Done, false, nil)
	case IsPermanent(err):
		log.WarnContext(ctx, "effect failed permanently", "attempt", e.Attempts, "error", err)
		if ferr := finish(Failed, false, err); ferr != nil {
			return ferr
		}
		return river.JobCancel(err)
	default:
		log.WarnContext(ctx, "effect attempt failed", "attempt", e.Attempts, "error", err, "last", last)
		if ferr := finish(retryState(last), true, err); ferr != nil {
			return ferr
		}
		return err
	}
}

// retryState is the state after a failed attempt: Retrying, or Failed when
// River will not try again.
func retryState(last bool) State {
	if last {
		return Failed
	}
	return Retrying
}

// unclaimed handles a job whose intent could not be claimed: it is settled
// (the job is done), missing, or another attempt holds it (the job waits).
func (c *Client) unclaimed(ctx context.Context, key string) error {
	e, err := c.Get(ctx, key)
	switch {
	case errors.Is(err, ErrNotFound):
		c.log.WarnContext(ctx, "effect job for an intent that does not exist", "key", key)
		return nil
	case err != nil:
		return err
	case e.State == Running:
		// Another attempt holds the claim: come back when its lease ends.
		return river.JobSnooze(max(time.Until(e.LeaseUntil), 0) + c.cfg.RetryBackoff)
	default:
		return nil
	}
}

// perform calls the handler with the attempt's timeout; a panic is an
// error.
func (c *Client) perform(ctx context.Context, h Handler, e *Effect) (err error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	ctx, end := c.traceAttempt(ctx, e)
	defer func() { end(err) }()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("effects: %s handler panicked: %v", e.Kind, r)
		}
	}()
	return h.Perform(ctx, e)
}

// askReconcile calls the handler's Reconcile with the attempt's timeout.
func (c *Client) askReconcile(ctx context.Context, r Reconciler, e *Effect) (done bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("effects: %s reconcile panicked: %v", e.Kind, p)
		}
	}()
	return r.Reconcile(ctx, e)
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
