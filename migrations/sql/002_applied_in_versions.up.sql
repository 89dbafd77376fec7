-- The applied log of an aggregate's recent versions moves into its version
-- row, so applying a run writes one row per aggregate instead of one row per
-- aggregate plus one per event.
--
-- A row's log covers versions log_base+1 … version, one entry per version:
-- log_ids[k] is the event id of version log_base+k (NULL for the default
-- "<aggregate>:<version>") and bytes 16(k-1) … 16k-1 of log_hashes its
-- 16-byte payload hash. When a write starts a new page (the processor does
-- so once a page holds 16 entries, and operators' actions always do), it
-- raises log_base, and the trigger below moves the old page's entries into
-- applied, one row per version, where every older entry lives — as every
-- entry did before this migration. So the entries of existing rows are in
-- applied already, and their logs start at their version.
ALTER TABLE versions
    ADD COLUMN log_base   bigint NOT NULL DEFAULT 0,
    ADD COLUMN log_ids    text[] NOT NULL DEFAULT '{}',
    ADD COLUMN log_hashes bytea  NOT NULL DEFAULT '';

UPDATE versions SET log_base = version;

CREATE FUNCTION versions_spill_log() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO applied (projection, aggregate, version, event_id, hash)
    SELECT OLD.projection, OLD.aggregate, OLD.log_base + n,
           coalesce(OLD.log_ids[n], OLD.aggregate || ':' || (OLD.log_base + n)),
           substring(OLD.log_hashes FROM 16 * (n - 1) + 1 FOR 16)
    FROM generate_series(1, cardinality(OLD.log_ids)) AS n;
    RETURN NULL;
END
$$;

-- The WHEN clause is evaluated without calling the function: an update that
-- appends to the page costs nothing more.
CREATE TRIGGER versions_spill_log
AFTER UPDATE ON versions
FOR EACH ROW WHEN (NEW.log_base <> OLD.log_base AND cardinality(OLD.log_ids) > 0)
EXECUTE FUNCTION versions_spill_log();

-- applied_log is the whole applied log, one row per applied version, for
-- operators and tests: the applied table and the version rows' pages.
CREATE VIEW applied_log AS
SELECT projection, aggregate, version, event_id, hash FROM applied
UNION ALL
SELECT v.projection, v.aggregate, v.log_base + n,
       coalesce(v.log_ids[n], v.aggregate || ':' || (v.log_base + n)),
       substring(v.log_hashes FROM 16 * (n - 1) + 1 FOR 16)
FROM versions v, generate_series(1, cardinality(v.log_ids)) AS n;
