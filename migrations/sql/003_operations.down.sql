ALTER TABLE rejected
    DROP COLUMN raw_event_id,
    DROP COLUMN raw_aggregate,
    DROP COLUMN raw_type;

ALTER TABLE conflicts DROP COLUMN acked_at, DROP COLUMN ack_reason;

-- Positions that are not EventStoreDB's C:<20 digits>/P:<20 digits>
-- (another source's) cannot go back; they become 0/0, as if the source had
-- never checkpointed.
ALTER TABLE checkpoints
    ADD COLUMN commit_position  bigint NOT NULL DEFAULT 0,
    ADD COLUMN prepare_position bigint NOT NULL DEFAULT 0;
UPDATE checkpoints SET
    commit_position  = substring(convert_from(position, 'UTF8') FROM 3 FOR 20)::bigint,
    prepare_position = substring(convert_from(position, 'UTF8') FROM 26 FOR 20)::bigint
WHERE encode(position, 'escape') ~ '^C:[0-9]{20}/P:[0-9]{20}$';
ALTER TABLE checkpoints
    ALTER COLUMN commit_position DROP DEFAULT,
    ALTER COLUMN prepare_position DROP DEFAULT,
    DROP COLUMN position;
