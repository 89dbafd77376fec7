-- inorder:online — a new table, its index and a sequence
-- Effects that leave PostgreSQL (package effects): one row per intent, the
-- exactly-once arbiter of external calls. key is the idempotency key: a
-- name-based UUID of the fact (effects.Intent.Key).
--
-- A projection's handler records an intent in the transaction that applies
-- the event, with INSERT … ON CONFLICT (key) DO NOTHING: the key is derived
-- from the fact (projection, event id, effect kind, optional discriminator
-- and salt — never an attempt or a random id), so a redelivered, replayed,
-- rebuilt or concurrently delivered event records it once. A River job that
-- carries the key executes it after the commit; whatever River does with
-- its jobs (retries, rescues, pruning of completed jobs), this row says
-- whether the effect is still to do. The intents of a large batch get their
-- jobs from one relay job instead, committed with them, which finds them by
-- kind, state and created_at (the recording transaction's start, the same
-- for all) through effects_open, and batch (a value of effects_batch_seq).
--
-- state: pending (recorded, not tried yet), running (an attempt holds the
-- claim until lease_until), retrying (the last attempt failed; River retries
-- it), done, failed (a permanent error, or the attempts ran out: stopped
-- until an operator retries or cancels it), cancelled (by an operator).
-- uncertain: an attempt called the remote side and its outcome is unknown
-- (a timeout, an error that may have come after the remote applied it, a
-- crash); the next attempt asks the remote first, if the effect's handler
-- can (Reconcile). claim counts the claims, so a stale attempt cannot
-- overwrite a newer one's outcome.
CREATE TABLE effects (
    key           uuid        PRIMARY KEY,
    projection    text        NOT NULL,
    kind          text        NOT NULL,
    event_id      text        NOT NULL,
    aggregate     text        NOT NULL,
    version       bigint      NOT NULL,
    discriminator text        NOT NULL DEFAULT '',
    salt          text        NOT NULL DEFAULT '',
    args          json        NOT NULL DEFAULT 'null',
    batch         bigint,
    state         text        NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'running', 'retrying', 'done', 'failed', 'cancelled')),
    uncertain     boolean     NOT NULL DEFAULT false,
    attempts      integer     NOT NULL DEFAULT 0,
    claim         bigint      NOT NULL DEFAULT 0,
    lease_until   timestamptz,
    job_id        bigint,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    done_at       timestamptz
);

-- The intents that are not settled, for status, metrics, listings, relay
-- jobs and the reconciliation pass; done and cancelled rows leave it.
CREATE INDEX effects_open ON effects (kind, state, created_at)
    WHERE state IN ('pending', 'running', 'retrying', 'failed');

CREATE SEQUENCE effects_batch_seq;
