-- inorder:offline — replaces the checkpoints' position columns that old workers write
-- Sources' positions become opaque to the core: a source encodes its
-- position as bytes whose byte order is the stream's order, and decodes it
-- itself. The only source that wrote checkpoints before, EventStoreDB,
-- encodes its (commit, prepare) positions as text with zero-padded numbers,
-- C:<20 digits>/P:<20 digits>, which keeps that order and reads well.
ALTER TABLE checkpoints ADD COLUMN position bytea;
UPDATE checkpoints SET position = convert_to(
    'C:' || lpad(commit_position::text, 20, '0') || '/P:' || lpad(prepare_position::text, 20, '0'), 'UTF8');
ALTER TABLE checkpoints
    ALTER COLUMN position SET NOT NULL,
    DROP COLUMN commit_position,
    DROP COLUMN prepare_position;

-- An operator acknowledges a conflict once it is understood; acknowledged
-- conflicts stay listed but no longer count as open.
ALTER TABLE conflicts
    ADD COLUMN acked_at   timestamptz,
    ADD COLUMN ack_reason text NOT NULL DEFAULT '';

-- A rejected delivery's text fields may hold what PostgreSQL text cannot
-- (NUL bytes, invalid UTF-8): the text columns then hold an escaped form
-- for operators, and these columns the exact bytes, for replay. NULL means
-- the text column is exact.
ALTER TABLE rejected
    ADD COLUMN raw_event_id  bytea,
    ADD COLUMN raw_aggregate bytea,
    ADD COLUMN raw_type      bytea;
