package effects

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// River's own intervals, fixed in the River release this package is built
// with: its rescuer looks for stuck jobs every 30 s, its scheduler makes due
// jobs available every 5 s, both on River's leader only, and a dead
// leader's successor is elected within its leadership's TTL (15 s) plus
// an election interval (5 s).
const (
	riverRescuerInterval   = 30 * time.Second
	riverSchedulerInterval = 5 * time.Second
	riverLeaderFailover    = 20 * time.Second
)

// reconcileBatch bounds how many intents one step of the reconciliation pass
// takes.
const reconcileBatch = 100

// jobTimeout is River's job timeout for a call timeout: an attempt's
// Reconcile and Perform calls, and its statements.
func jobTimeout(timeout time.Duration) time.Duration { return 2*timeout + 5*time.Second }

// Recovery is a Client's recovery policy: how long after an executor dies
// — a process killed, a machine lost — the intents it held are attempted
// again, and how long River's own rows of it stay behind. It is derived from
// the Config; Client.Recovery returns it.
//
// An attempt holds its intent by a claim that lasts Lease (Config.Lease,
// from the claim, renewed when the call starts after a Reconcile), and its
// calls end after CallTimeout, which is shorter. So once a claim expired,
// its attempt is not calling any more — or its executor ignored the
// context, or was frozen longer than Lease − CallTimeout —, and another
// attempt may take the intent. River's jobs are only wake-ups; what a dead
// executor can leave behind is one of:
//
//   - an intent running, its claim held by the dead attempt: taken up once
//     the claim expired ("claim_expired");
//   - an intent pending or retrying whose River job is running under the
//     dead client — fetched but not claimed yet, or its outcome recorded but
//     River's job not updated: taken up once the job has run for Lease
//     ("job_died"; a live job claims or finishes within milliseconds);
//   - pending intents of a batch whose relay job is running under the dead
//     client, their own jobs never enqueued: taken up once the relay job has
//     run for Lease ("relay_died").
//
// The reconciliation pass, every ReconcileInterval in every started Client,
// gives each such intent — unless a River job that will take it up exists —
// a new job (an intent that was retrying gets it when its backoff ends), and
// counts the recovery (Effect.Recoveries, inorder_effects_recoveries_total).
// The job has River priority 1, ahead of the first jobs of other intents
// (priority 2), so it does not wait behind a backlog. Hence IntentBound: an
// intent whose executor died is attempted again within Lease +
// ReconcileInterval + PollInterval of the death, or when its backoff ends
// if that is later — as long as one Client runs and a worker of it frees
// (calls end within CallTimeout).
//
// River's own rows of the dead client stay running until River's leader
// rescues them, RescueAfter after they started (River's rescuer runs every
// 30 s; a dead leader is replaced within about 20 s), and then run once more
// after their retry delay, finding their intent settled. JobBound is that
// bound, the retry delay excluded. They hold no intent meanwhile: the
// claim, not River's job state, decides who calls.
//
// Why recovery cannot call twice where a single executor would not: the
// claim is one conditional UPDATE that succeeds only on a pending or
// retrying intent, or on one whose claim expired; each claim has its own
// number, and an attempt records its outcome only while the claim is still
// its own. Recovery only adds River jobs, never a claim, so the jobs it
// adds — like the jobs River rescues, relays repeat or operators retry —
// find the intent held, settled, or free: at most one attempt calls at a
// time. A second call of an effect happens only after an attempt whose
// outcome is unknown — it timed out, failed, or its executor died after
// calling —, with the same key; that is the at-least-once case an
// idempotent receiver or a Reconciler absorbs (see package doc).
type Recovery struct {
	// CallTimeout bounds each Perform and Reconcile call (Config.Timeout).
	CallTimeout time.Duration `json:"call_timeout"`
	// Lease is how long a claim lasts, and how long a River job may run
	// without holding its intent (Config.Lease).
	Lease time.Duration `json:"lease"`
	// ReconcileInterval is how often the reconciliation pass runs
	// (Config.ReconcileInterval).
	ReconcileInterval time.Duration `json:"reconcile_interval"`
	// PollInterval is how often River looks for jobs without a
	// notification (Config.PollInterval).
	PollInterval time.Duration `json:"poll_interval"`
	// JobTimeout is River's job timeout: 2×CallTimeout + 5 s.
	JobTimeout time.Duration `json:"job_timeout"`
	// RescueAfter is River's RescueStuckJobsAfter (Config.RescueAfter).
	RescueAfter time.Duration `json:"rescue_after"`
	// IntentBound is Lease + ReconcileInterval + PollInterval: how long
	// after its executor died an intent is attempted again (or when its
	// backoff ends, if later).
	IntentBound time.Duration `json:"intent_bound"`
	// JobBound is RescueAfter + River's rescuer interval (30 s) + a
	// leader's failover (20 s) + River's scheduler interval (5 s): how long
	// River's jobs of a dead executor stay running, before they run once
	// more (after their retry delay) and complete.
	JobBound time.Duration `json:"job_bound"`
}

// Recovery returns the Client's recovery policy.
func (c *Client) Recovery() Recovery {
	return Recovery{
		CallTimeout:       c.cfg.Timeout,
		Lease:             c.cfg.Lease,
		ReconcileInterval: c.cfg.ReconcileInterval,
		PollInterval:      c.cfg.PollInterval,
		JobTimeout:        jobTimeout(c.cfg.Timeout),
		RescueAfter:       c.cfg.RescueAfter,
		IntentBound:       c.cfg.Lease + c.cfg.ReconcileInterval + c.cfg.PollInterval,
		JobBound:          c.cfg.RescueAfter + riverRescuerInterval + riverLeaderFailover + riverSchedulerInterval,
	}
}

// Causes of a recovery, the cause label of inorder_effects_recoveries_total.
const (
	// RecoveredClaimExpired: the intent was running and its attempt's
	// claim expired.
	RecoveredClaimExpired = "claim_expired"
	// RecoveredJobDied: the intent was pending or retrying, and its River
	// job had been running for longer than the lease without holding it.
	RecoveredJobDied = "job_died"
	// RecoveredRelayDied: the intent was pending, and its batch's relay
	// job had been running for longer than the lease.
	RecoveredRelayDied = "relay_died"
)

var recoveryCauses = map[int]string{1: RecoveredClaimExpired, 2: RecoveredJobDied, 3: RecoveredRelayDied}

// recoverOrphans is one step of the reconciliation pass: it gives up to
// reconcileBatch orphans a new River job each, in one transaction, and
// returns how many it recovered per cause.
func (c *Client) recoverOrphans(ctx context.Context) (map[string]int, int, error) {
	type orphan struct {
		key, kind, was string
		attempts, prio int
		updated, now   time.Time
	}
	var got []orphan
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, c.sql.recoverOrphans, c.cfg.Queue, c.lease(), reconcileBatch)
		if err != nil {
			return err
		}
		var o orphan
		if _, err := pgx.ForEachRow(rows, []any{&o.key, &o.kind, &o.was, &o.attempts, &o.updated, &o.prio, &o.now}, func() error {
			got = append(got, o)
			return nil
		}); err != nil {
			return err
		}
		if len(got) == 0 {
			return nil
		}
		jobs := make([]river.InsertManyParams, len(got))
		for i, o := range got {
			// Ahead of the first jobs of a backlog (priorityFirst).
			opts := &river.InsertOpts{Queue: c.cfg.Queue, MaxAttempts: c.cfg.MaxAttempts, Priority: priorityFirst}
			if o.was == string(Retrying) {
				// Its outcome was recorded: the retry waits for its backoff.
				if wait := o.updated.Add(c.backoff(o.attempts)).Sub(o.now); wait > riverSchedulerInterval {
					opts.ScheduledAt = time.Now().Add(wait)
				}
			}
			jobs[i] = river.InsertManyParams{Args: jobArgs{Key: o.key, Effect: o.kind}, InsertOpts: opts}
		}
		return c.enqueue(ctx, tx, jobs)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("effects: recover intents of dead executors: %w", err)
	}
	by := map[string]int{}
	for _, o := range got {
		cause := recoveryCauses[o.prio]
		by[cause]++
		c.tally.recovered(o.kind, cause)
		c.log.WarnContext(ctx, "effect whose executor died handed a new job", "key", o.key, "effect", o.kind, "cause", cause, "was", o.was)
	}
	return by, len(got), nil
}
