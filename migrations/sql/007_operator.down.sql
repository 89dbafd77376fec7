-- Rolling back keeps the merged rejected rows merged; their fingerprints
-- stay the new ones (a redelivery may then add a row the old way).
DROP TABLE sources;
ALTER TABLE operator_log DROP COLUMN generation, DROP COLUMN actor;
DROP INDEX rejected_pending;
ALTER TABLE rejected
    DROP COLUMN content_type,
    DROP COLUMN resolved_at,
    DROP COLUMN resolution,
    DROP COLUMN resolved_by,
    DROP COLUMN resolve_reason;
