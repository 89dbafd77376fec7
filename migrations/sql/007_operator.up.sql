-- inorder:offline — rewrites rejected (new fingerprints, merged rows) and indexes it without CONCURRENTLY; old workers would write old fingerprints
-- Operator tools that never mislead (issue 25).

-- A rejected delivery is one row per bad event, however often and by
-- whichever path (a worker, a repair, a replay) it arrives: its fingerprint
-- is the hash of the delivered envelope alone — event id, aggregate,
-- version, type, content type, data, metadata — no longer of its source and
-- error text. content_type is the delivery's content type as the source
-- gave it ('' when the source has none), which validation checks and a
-- replay checks again. An operator resolves a row — replays it, dismisses
-- it, or declares its version missing — and resolved rows no longer count
-- as pending; resolution says how (replayed, dismissed, declared-gap),
-- resolved_by who, resolve_reason why.
ALTER TABLE rejected
    ADD COLUMN content_type   text NOT NULL DEFAULT '',
    ADD COLUMN resolved_at    timestamptz,
    ADD COLUMN resolution     text NOT NULL DEFAULT '',
    ADD COLUMN resolved_by    text NOT NULL DEFAULT '',
    ADD COLUMN resolve_reason text NOT NULL DEFAULT '';

-- The EventStoreDB source rejected non-JSON content types itself, saying so
-- in the error only.
UPDATE rejected SET content_type = substring(error FROM 'content type (.+) is not JSON')
WHERE error ~ 'content type (.+) is not JSON' AND substring(error FROM 'content type (.+) is not JSON') <> '""';

UPDATE rejected SET resolved_at = replayed_at, resolution = 'replayed' WHERE replayed_at IS NOT NULL;

-- The new fingerprints; rows that now share one are merged into the first.
ALTER TABLE rejected ADD COLUMN new_fingerprint bytea;
UPDATE rejected SET new_fingerprint = sha256(
    coalesce(raw_event_id, convert_to(event_id, 'UTF8')) || '\x00'::bytea ||
    coalesce(raw_aggregate, convert_to(aggregate, 'UTF8')) || '\x00'::bytea ||
    convert_to(version::text, 'UTF8') || '\x00'::bytea ||
    coalesce(raw_type, convert_to(type, 'UTF8')) || '\x00'::bytea ||
    convert_to(content_type, 'UTF8') || '\x00'::bytea ||
    coalesce(data, ''::bytea) || '\x00'::bytea ||
    coalesce(metadata, ''::bytea) || '\x00'::bytea);
WITH merged AS (
    SELECT new_fingerprint, min(id) AS id, sum(count) AS count, min(first_seen) AS first_seen,
        max(last_seen) AS last_seen, max(replayed_at) AS replayed_at, max(resolved_at) AS resolved_at
    FROM rejected GROUP BY new_fingerprint HAVING count(*) > 1)
UPDATE rejected r SET count = m.count, first_seen = m.first_seen, last_seen = m.last_seen,
    replayed_at = m.replayed_at, resolved_at = m.resolved_at,
    resolution = CASE WHEN m.resolved_at IS NULL THEN '' ELSE 'replayed' END
FROM merged m WHERE r.id = m.id;
DELETE FROM rejected r USING rejected k
WHERE r.new_fingerprint = k.new_fingerprint AND r.id > k.id;
UPDATE rejected SET fingerprint = new_fingerprint;
ALTER TABLE rejected DROP COLUMN new_fingerprint;

-- The pending rows of an aggregate, for the count and for declare-gap (by
-- the aggregate's hash: a rejected aggregate id may be longer than an index
-- entry can be).
CREATE INDEX rejected_pending ON rejected (md5(aggregate), version) WHERE resolved_at IS NULL;

-- The operator log says which generation an action concerned (NULL: none,
-- or the live one before this migration) and who acted ('' when nobody
-- said: a source's finding, or a command run before this migration).
ALTER TABLE operator_log
    ADD COLUMN generation integer,
    ADD COLUMN actor      text NOT NULL DEFAULT '';

-- sources records, per source name (the checkpoint's and the metrics'
-- name), how its workers map the stream to aggregates: what a repair of
-- parked events, run from anywhere, needs to read the streams the workers
-- read. Every worker writes its row when it starts; kind names the source
-- (esdb, postgres, nats, kafka, …) and mapping is its own JSON.
CREATE TABLE sources (
    name       text PRIMARY KEY,
    kind       text NOT NULL,
    mapping    jsonb NOT NULL DEFAULT '{}',
    host       text NOT NULL DEFAULT '',
    started_at timestamptz NOT NULL DEFAULT now()
);
