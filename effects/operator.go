package effects

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inorder/inorder/projection"
)

// StateError reports an operator action that the intent's state does not
// allow: retrying a done intent, cancelling one whose attempt is under way.
type StateError struct {
	// Key is the intent's key.
	Key string
	// Action is what was refused: "retry" or "cancel".
	Action string
	// State is the intent's state, which does not allow it.
	State State
}

// Error implements error.
func (e *StateError) Error() string {
	return fmt.Sprintf("effects: cannot %s intent %s: it is %s", e.Action, e.Key, e.State)
}

// Get returns the intent of key, or an error wrapping ErrNotFound.
func (c *Client) Get(ctx context.Context, key string) (Effect, error) {
	if !validKey(key) {
		return Effect{}, fmt.Errorf("effects: %q is not an intent key: %w", key, ErrNotFound)
	}
	var e Effect
	err := scanEffect(c.pool.QueryRow(ctx, c.sql.get, key), &e)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Effect{}, fmt.Errorf("effects: %s: %w", key, ErrNotFound)
	case err != nil:
		return Effect{}, fmt.Errorf("effects: get %s: %w", key, err)
	}
	es := []Effect{e}
	if err := c.markOrphans(ctx, es); err != nil {
		return Effect{}, fmt.Errorf("effects: get %s: %w", key, err)
	}
	return es[0], nil
}

// riverReady reports whether River's job table exists (it does once
// River's migrations ran): orphans are found through it, and without it
// there are none.
func (c *Client) riverReady(ctx context.Context) (bool, error) {
	if c.riverSeen.Load() {
		return true, nil
	}
	var ok bool
	if err := c.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, c.sql.riverJobs).Scan(&ok); err != nil {
		return false, fmt.Errorf("look for River's job table: %w", err)
	}
	if ok {
		c.riverSeen.Store(true)
	}
	return ok, nil
}

// markOrphans sets Orphaned on the effects of es that are orphans.
func (c *Client) markOrphans(ctx context.Context, es []Effect) error {
	var keys []string
	for _, e := range es {
		if e.State == Pending || e.State == Running || e.State == Retrying {
			keys = append(keys, e.Key)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	if ok, err := c.riverReady(ctx); err != nil || !ok {
		return err
	}
	rows, err := c.pool.Query(ctx, c.sql.orphanKeys, c.cfg.Queue, c.lease(), keys)
	if err != nil {
		return fmt.Errorf("find orphans: %w", err)
	}
	orphans, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("find orphans: %w", err)
	}
	for i := range es {
		es[i].Orphaned = slices.Contains(orphans, es[i].Key)
	}
	return nil
}

// List returns intents, oldest first. It reads opts' State, Kind,
// Projection and Orphaned filters, which keep only the intents that match
// them all (see projection.ListOptions), and Limit (default
// projection.DefaultListLimit); it ignores the other fields. A State not
// in States is an error.
func (c *Client) List(ctx context.Context, opts projection.ListOptions) ([]Effect, error) {
	if opts.State != "" && !slices.Contains(States, State(opts.State)) {
		return nil, fmt.Errorf("effects: list: unknown state %q", opts.State)
	}
	limit := opts.Limit
	if limit <= 0 {
		limit = projection.DefaultListLimit
	}
	var rows pgx.Rows
	var err error
	switch {
	case !opts.Orphaned:
		rows, err = c.pool.Query(ctx, c.sql.list, opts.State, opts.Kind, opts.Projection, limit)
	default:
		ok, rerr := c.riverReady(ctx)
		if rerr != nil || !ok {
			return []Effect{}, rerr
		}
		rows, err = c.pool.Query(ctx, c.sql.orphanList, c.cfg.Queue, c.lease(), opts.State, opts.Kind, opts.Projection, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("effects: list: %w", err)
	}
	out := []Effect{}
	for rows.Next() {
		var e Effect
		if err := scanEffect(rows, &e); err != nil {
			rows.Close()
			return nil, fmt.Errorf("effects: list: %w", err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("effects: list: %w", err)
	}
	if opts.Orphaned {
		for i := range out {
			out[i].Orphaned = true
		}
	} else if err := c.markOrphans(ctx, out); err != nil {
		return nil, fmt.Errorf("effects: list: %w", err)
	}
	return out, nil
}

// Retry reopens an intent — failed, cancelled, or waiting (pending,
// retrying) — and enqueues a job for it now, in one transaction. If its
// last outcome is uncertain, the attempt asks Reconcile first. A done
// intent, or one whose attempt is under way, is refused with a
// *StateError.
func (c *Client) Retry(ctx context.Context, key string) (Effect, error) {
	e, err := c.retry(ctx, key, false)
	if err == nil {
		c.log.InfoContext(ctx, "effect retried by an operator", "key", key, "effect", e.Kind)
	}
	return e, err
}

// DryRunRetry reports what Retry would do and changes nothing: it runs
// Retry's statements in a transaction it rolls back, and returns the intent
// as Retry would leave it, or the same refusal (a *StateError, or
// ErrNotFound).
func (c *Client) DryRunRetry(ctx context.Context, key string) (Effect, error) {
	return c.retry(ctx, key, true)
}

func (c *Client) retry(ctx context.Context, key string, dry bool) (Effect, error) {
	if !validKey(key) {
		return Effect{}, fmt.Errorf("effects: %q is not an intent key: %w", key, ErrNotFound)
	}
	var e Effect
	err := c.inTx(ctx, dry, func(tx pgx.Tx) error {
		if err := scanEffect(tx.QueryRow(ctx, c.sql.retry, key), &e); err != nil {
			return err
		}
		return c.enqueue(ctx, tx, c.jobsFor([]string{e.Key}, []string{e.Kind}, priorityFirst))
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Effect{}, c.refused(ctx, key, "retry")
	}
	if err != nil {
		return Effect{}, fmt.Errorf("effects: retry %s: %w", key, err)
	}
	return e, nil
}

// Cancel gives up on an intent that is not done: it is never executed
// again (a job already enqueued for it completes without calling anything).
// reason is kept as its last error. An intent whose attempt is under way is
// refused with a *StateError: the call may be reaching the remote side; try
// again once it ended.
func (c *Client) Cancel(ctx context.Context, key, reason string) (Effect, error) {
	e, err := c.cancel(ctx, key, reason, false)
	if err == nil {
		c.log.InfoContext(ctx, "effect cancelled by an operator", "key", key, "effect", e.Kind, "reason", reason)
	}
	return e, err
}

// DryRunCancel reports what Cancel would do and changes nothing: it runs
// Cancel's statement in a transaction it rolls back, and returns the intent
// as Cancel would leave it, or the same refusal.
func (c *Client) DryRunCancel(ctx context.Context, key, reason string) (Effect, error) {
	return c.cancel(ctx, key, reason, true)
}

func (c *Client) cancel(ctx context.Context, key, reason string, dry bool) (Effect, error) {
	if !validKey(key) {
		return Effect{}, fmt.Errorf("effects: %q is not an intent key: %w", key, ErrNotFound)
	}
	var e Effect
	err := c.inTx(ctx, dry, func(tx pgx.Tx) error {
		return scanEffect(tx.QueryRow(ctx, c.sql.cancel, key, "cancelled: "+cmp.Or(reason, "by an operator")), &e)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Effect{}, c.refused(ctx, key, "cancel")
	}
	if err != nil {
		return Effect{}, fmt.Errorf("effects: cancel %s: %w", key, err)
	}
	return e, nil
}

// errDryRun rolls a dry run's transaction back.
var errDryRun = errors.New("effects: dry run")

// inTx runs fn in a transaction, rolled back if dry.
func (c *Client) inTx(ctx context.Context, dry bool, fn func(pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		if dry {
			return errDryRun
		}
		return nil
	})
	if errors.Is(err, errDryRun) {
		return nil
	}
	return err
}

// refused explains why an operator action matched no row.
func (c *Client) refused(ctx context.Context, key, action string) error {
	e, err := c.Get(ctx, key)
	if err != nil {
		return err
	}
	return &StateError{Key: key, Action: action, State: e.State}
}

// KindStats are the open intents of one kind.
type KindStats struct {
	// Kind is the effect kind.
	Kind string `json:"kind"`
	// Pending, Running, Retrying and Failed count the intents in each
	// state; Uncertain those among them whose last outcome is unknown.
	Pending   int64 `json:"pending"`
	Running   int64 `json:"running"`
	Retrying  int64 `json:"retrying"`
	Failed    int64 `json:"failed"`
	Uncertain int64 `json:"uncertain"`
	// Orphaned counts the open intents whose executor died and that no
	// River job will take up yet (see Recovery and Effect.Orphaned).
	Orphaned int64 `json:"orphaned"`
	// OldestPending is when the oldest pending or retrying intent was
	// recorded; zero if there is none.
	OldestPending time.Time `json:"oldest_pending,omitzero"`
}

// OldestPendingAge is how long the oldest pending or retrying intent has
// waited at now; zero if there is none.
func (s KindStats) OldestPendingAge(now time.Time) time.Duration {
	if s.OldestPending.IsZero() {
		return 0
	}
	return max(now.Sub(s.OldestPending), 0)
}

// Stats returns the open intents per kind, for status and metrics: every
// kind of the Client's handlers, and any other kind found in the table,
// sorted by kind.
func (c *Client) Stats(ctx context.Context) ([]KindStats, error) {
	rows, err := c.pool.Query(ctx, c.sql.stats)
	if err != nil {
		return nil, fmt.Errorf("effects: stats: %w", err)
	}
	by := map[string]*KindStats{}
	for _, k := range c.Kinds() {
		by[k] = &KindStats{Kind: k}
	}
	var kind, state string
	var n, uncertain int64
	var oldest time.Time
	if _, err := pgx.ForEachRow(rows, []any{&kind, &state, &n, &uncertain, &oldest}, func() error {
		s := by[kind]
		if s == nil {
			s = &KindStats{Kind: kind}
			by[kind] = s
		}
		s.Uncertain += uncertain
		switch State(state) {
		case Pending:
			s.Pending += n
		case Running:
			s.Running += n
		case Retrying:
			s.Retrying += n
		case Failed:
			s.Failed += n
		}
		if (State(state) == Pending || State(state) == Retrying) && (s.OldestPending.IsZero() || oldest.Before(s.OldestPending)) {
			s.OldestPending = oldest
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("effects: stats: %w", err)
	}
	if ok, err := c.riverReady(ctx); err != nil {
		return nil, fmt.Errorf("effects: stats: %w", err)
	} else if ok {
		rows, err := c.pool.Query(ctx, c.sql.orphanStats, c.cfg.Queue, c.lease())
		if err != nil {
			return nil, fmt.Errorf("effects: stats: orphans: %w", err)
		}
		if _, err := pgx.ForEachRow(rows, []any{&kind, &n}, func() error {
			s := by[kind]
			if s == nil {
				s = &KindStats{Kind: kind}
				by[kind] = s
			}
			s.Orphaned = n
			return nil
		}); err != nil {
			return nil, fmt.Errorf("effects: stats: orphans: %w", err)
		}
	}
	out := make([]KindStats, 0, len(by))
	for _, s := range by {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b KindStats) int { return cmp.Compare(a.Kind, b.Kind) })
	return out, nil
}
