ALTER TABLE effects DROP COLUMN recoveries;
