-- inorder:online — new tables
-- Generations of projections (package projection, generations.go): a
-- generation is a projection's read model built by one version of its code,
-- with read-model tables of its own (in schema, or in the connection's
-- search_path for generation 1) and gate state of its own (every gate row
-- whose projection column is key). Exactly one generation of a projection is
-- live: readers, the HTTP API and operator tools use it. A side-by-side
-- rebuild builds a new one while the live one keeps serving, and switches
-- it in with one transaction.
--
-- state:
--   building   replayed from the start of the stream by one rebuilder, in
--              bulk; fed by nobody else;
--   catchup    built; fed by the rebuilder up to the stream's end and by
--              every processor whose projection has the generation's
--              code_version; verified, then switched in;
--   live       the one readers use; fed by the processors of its
--              code_version;
--   previous   the live one before the last switch (or rollback): still fed,
--              so a rollback is instant and exact, until keep_until;
--   failed     did not pass verification (error says why); kept for
--              inspection, fed by nobody;
--   retired    no longer fed: a previous one past keep_until; dropped by
--              the next rebuild or by an operator;
--   dropped    its tables and gate rows are gone; the row stays as history.
-- A projection without a row is at generation 1, live, unqualified tables.
CREATE TABLE generations (
    projection   text        NOT NULL,
    generation   integer     NOT NULL CHECK (generation >= 1),
    code_version integer     NOT NULL,
    key          text        NOT NULL UNIQUE,
    schema       text        NOT NULL DEFAULT '',
    state        text        NOT NULL
        CHECK (state IN ('building', 'catchup', 'live', 'previous', 'failed', 'retired', 'dropped')),
    -- phase refines state for operators: replay, finalize, catch-up,
    -- verify, switch.
    phase        text        NOT NULL DEFAULT '',
    -- position is the rebuilder's source position (opaque bytes, compared
    -- as such), position_time the source's time of the event there, events
    -- the events the rebuilder has read; head the source's end when last
    -- measured.
    position     bytea,
    position_time timestamptz,
    events       bigint      NOT NULL DEFAULT 0,
    head         bytea,
    error        text        NOT NULL DEFAULT '',
    keep_until   timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    live_at      timestamptz,
    ended_at     timestamptz,
    PRIMARY KEY (projection, generation)
);

-- Exactly one live generation per projection.
CREATE UNIQUE INDEX generations_live ON generations (projection) WHERE state = 'live';

-- generation_epoch changes whenever the set of generations processors feed
-- changes (a generation enters catch-up, is switched in, rolled back,
-- retired, failed or dropped). Every batch transaction reads it first and
-- starts again with fresh generations if it changed since they were read:
-- no batch that began before a change commits under the old set.
CREATE TABLE generation_epoch (
    id    boolean PRIMARY KEY DEFAULT true CHECK (id),
    epoch bigint  NOT NULL
);
INSERT INTO generation_epoch (epoch) VALUES (1);
