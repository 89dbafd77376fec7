-- inorder:offline — rewrites every versions row (UPDATE), and old workers write the applied log where new ones do not read it
-- The applied log of an aggregate's recent versions moves into its version
-- row, so applying a run writes one row per aggregate instead of one row per
-- aggregate plus one per event.
--
-- A row's log covers versions log_base+1 … version, one entry per version:
-- log_ids[k] is the event id of version log_base+k (NULL for the default
-- "<aggregate>:<version>") and bytes 16(k-1) … 16k-1 of log_hashes its
-- 16-byte payload hash. A write that takes an aggregate into a new page of
-- 16 versions (or an operator's action) starts a new log at the row's
-- version, and the processor first moves the old log's entries into applied,
-- one row per version, where every older entry lives (see
-- projection/statements.go) — as every entry did before this migration. So
-- the entries of existing rows are in applied already, and their logs start
-- at their version.
ALTER TABLE versions
    ADD COLUMN log_base   bigint NOT NULL DEFAULT 0,
    ADD COLUMN log_ids    text[] NOT NULL DEFAULT '{}',
    ADD COLUMN log_hashes bytea  NOT NULL DEFAULT '';

UPDATE versions SET log_base = version;

-- applied_log is the whole applied log, one row per applied version, for
-- operators and tests: the applied table and the version rows' pages.
CREATE VIEW applied_log AS
SELECT projection, aggregate, version, event_id, hash FROM applied
UNION ALL
SELECT v.projection, v.aggregate, v.log_base + n,
       coalesce(v.log_ids[n], v.aggregate || ':' || (v.log_base + n)),
       substring(v.log_hashes FROM 16 * (n - 1) + 1 FOR 16)
FROM versions v, generate_series(1, cardinality(v.log_ids)) AS n;
