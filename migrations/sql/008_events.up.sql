-- inorder:online — a new table, its indexes, function and trigger
-- events is inorder's own event store, for applications that want their
-- events in their own PostgreSQL (package source/pgtable writes it with
-- Append and reads it as a source). One row per event; (aggregate, version)
-- is unique: two writers of the same version, one fails (optimistic
-- concurrency). data and metadata are json, not jsonb: the payload is kept
-- byte for byte, as it was appended (its hash tells a copy from a conflict).
--
-- seq is handed out at insert and becomes visible at commit, so a reader
-- cannot take "seq > last" as its position: a transaction that took a low
-- seq and commits late would be skipped for ever. txid, the inserting
-- transaction's id, is what the reader orders and bounds by: it reads rows
-- whose txid is below the oldest transaction still running
-- (pg_snapshot_xmin(pg_current_snapshot())), in (txid, seq) order, and no
-- row can ever appear below a position it has passed.
CREATE TABLE events (
    seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    txid        xid8 NOT NULL DEFAULT pg_current_xact_id(),
    aggregate   text NOT NULL,
    version     bigint NOT NULL CHECK (version >= 1),
    id          text NOT NULL,
    type        text NOT NULL,
    data        json NOT NULL,
    metadata    json,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (aggregate, version)
);

-- The readers' order, one range per partition of the aggregate space:
-- partition = mod(hashtext(aggregate) & 2147483647, 16), the expression the
-- source queries with its default 16 partitions.
CREATE INDEX events_partition_order ON events ((mod(hashtext(aggregate) & 2147483647, 16)), txid, seq);
-- The whole table's order: rebuilds replay it, and a source configured with
-- one partition reads it.
CREATE INDEX events_order ON events (txid, seq);

-- A commit of new events wakes the readers (LISTEN inorder_events); the
-- notification carries the table's schema, and PostgreSQL sends one per
-- transaction and schema.
CREATE FUNCTION events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('inorder_events', TG_TABLE_SCHEMA);
    RETURN NULL;
END
$$;

CREATE TRIGGER events_notify AFTER INSERT ON events
    FOR EACH STATEMENT EXECUTE FUNCTION events_notify();
