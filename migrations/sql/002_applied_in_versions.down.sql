-- Move the entries of the version rows' logs back into applied.
DROP VIEW applied_log;

INSERT INTO applied (projection, aggregate, version, event_id, hash)
SELECT v.projection, v.aggregate, v.log_base + n,
       coalesce(v.log_ids[n], v.aggregate || ':' || (v.log_base + n)),
       substring(v.log_hashes FROM 16 * (n - 1) + 1 FOR 16)
FROM versions v, generate_series(1, cardinality(v.log_ids)) AS n
ON CONFLICT DO NOTHING;

ALTER TABLE versions DROP COLUMN log_base, DROP COLUMN log_ids, DROP COLUMN log_hashes;
