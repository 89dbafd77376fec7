-- inorder:offline — CREATE INDEX without CONCURRENTLY and DROP INDEX on effects block its writers while the index is built
-- Pending intents leave effects_open for effects_pending, an index on their
-- batch number: recording a batch's intents appends its entries at the end
-- of a small bigint index (effects_batch_seq only grows; one key per batch)
-- rather than into the (kind, state, created_at) one. A relay job finds its
-- batch through effects_pending (batch = its number AND state = 'pending');
-- the intents recorded with a job each (batch NULL) are there too, for
-- status and metrics. effects_open keeps the intents an attempt or an
-- operator holds: running, retrying and failed.
CREATE INDEX effects_pending ON effects (batch) WHERE state = 'pending';
DROP INDEX effects_open;
CREATE INDEX effects_open ON effects (kind, state, created_at)
    WHERE state IN ('running', 'retrying', 'failed');
