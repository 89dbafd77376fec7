-- inorder:online — new tables in an empty schema
-- inorder core tables. The migrator runs this with search_path set to the
-- configured schema (default "inorder"), so names are unqualified.

-- versions holds, per (projection, aggregate), the last applied version, how
-- many events are parked and whether one is quarantined. rev counts the row's
-- changes: a writer that read rev r may only write where rev is still r (a
-- compare-and-set), so every change to an aggregate's gate state is
-- serialised through this row.
CREATE TABLE versions (
    projection  text NOT NULL,
    aggregate   text NOT NULL,
    version     bigint NOT NULL DEFAULT 0,
    parked      integer NOT NULL DEFAULT 0,
    blocked     boolean NOT NULL DEFAULT false,
    rev         bigint NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, aggregate)
);

-- applied records the id and payload hash of every applied version, so a
-- stale redelivery can be told apart from a conflicting one.
CREATE TABLE applied (
    projection  text NOT NULL,
    aggregate   text NOT NULL,
    version     bigint NOT NULL,
    event_id    text NOT NULL,
    hash        bytea NOT NULL,
    PRIMARY KEY (projection, aggregate, version)
);

-- parked holds future versions until their predecessors arrive.
CREATE TABLE parked (
    projection  text NOT NULL,
    aggregate   text NOT NULL,
    version     bigint NOT NULL,
    event_id    text NOT NULL,
    hash        bytea NOT NULL,
    type        text NOT NULL,
    data        bytea NOT NULL,
    metadata    bytea,
    parked_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, aggregate, version)
);
-- No index on parked_at: every park would pay for it, while the operator
-- views that sort by age scan a table that is small in steady state.

-- quarantine holds the one event per (projection, aggregate) whose handler
-- failed for good; the aggregate's later versions park behind it.
CREATE TABLE quarantine (
    projection      text NOT NULL,
    aggregate       text NOT NULL,
    version         bigint NOT NULL,
    event_id        text NOT NULL,
    hash            bytea NOT NULL,
    type            text NOT NULL,
    data            bytea NOT NULL,
    metadata        bytea,
    error           text NOT NULL,
    attempts        integer NOT NULL DEFAULT 1,
    quarantined_at  timestamptz NOT NULL DEFAULT now(),
    last_attempt_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, aggregate)
);

-- conflicts records deliveries that reuse an (aggregate, version) with a
-- different event id or payload than the one applied or parked.
CREATE TABLE conflicts (
    id                bigserial PRIMARY KEY,
    projection        text NOT NULL,
    aggregate         text NOT NULL,
    version           bigint NOT NULL,
    existing_state    text NOT NULL,
    existing_event_id text NOT NULL,
    existing_hash     bytea NOT NULL,
    incoming_event_id text NOT NULL,
    incoming_hash     bytea NOT NULL,
    type              text NOT NULL,
    data              bytea NOT NULL,
    metadata          bytea,
    count             bigint NOT NULL DEFAULT 1,
    first_seen        timestamptz NOT NULL DEFAULT now(),
    last_seen         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (projection, aggregate, version, incoming_event_id, incoming_hash)
);

-- rejected keeps every delivery that failed validation, with the reason, for
-- an operator to inspect and replay.
CREATE TABLE rejected (
    id          bigserial PRIMARY KEY,
    fingerprint bytea NOT NULL UNIQUE,
    source      text NOT NULL DEFAULT '',
    event_id    text NOT NULL DEFAULT '',
    aggregate   text NOT NULL DEFAULT '',
    version     bigint NOT NULL DEFAULT 0,
    type        text NOT NULL DEFAULT '',
    data        bytea,
    metadata    bytea,
    reason      text NOT NULL,
    error       text NOT NULL,
    count       bigint NOT NULL DEFAULT 1,
    first_seen  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now(),
    replayed_at timestamptz
);

-- operator_log records every operator decision: skips, declared gaps,
-- retries, replays and rebuilds.
CREATE TABLE operator_log (
    id           bigserial PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT now(),
    action       text NOT NULL,
    projection   text NOT NULL DEFAULT '',
    aggregate    text NOT NULL DEFAULT '',
    from_version bigint,
    to_version   bigint,
    reason       text NOT NULL DEFAULT ''
);

-- checkpoints lets a source store its position in the same transaction as
-- the projection writes it led to.
CREATE TABLE checkpoints (
    name             text PRIMARY KEY,
    commit_position  bigint NOT NULL,
    prepare_position bigint NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT now()
);
