-- inorder:online — a column with a constant default (no rewrite; a brief lock)
-- recoveries counts the times the reconciliation pass of package effects
-- took an intent up after its executor died: its attempt's claim expired,
-- or its River job (or its batch's relay job) ran under a dead client
-- (effects.Recovery). Operators see it in `inorder effects list` and show.
-- A constant default: no table rewrite.
ALTER TABLE effects ADD COLUMN recoveries integer NOT NULL DEFAULT 0;
