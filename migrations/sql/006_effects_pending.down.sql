DROP INDEX effects_open;
CREATE INDEX effects_open ON effects (kind, state, created_at)
    WHERE state IN ('pending', 'running', 'retrying', 'failed');
DROP INDEX effects_pending;
