-- inorder:online — a new table
-- owners holds the leases of fenced owners (projection.Config.Owner;
-- docs/owner.md): one row per gate key a process owns. token is bumped by
-- every new owner, so that the previous one's transactions, which check it,
-- stop trusting their memory; foreign_n is bumped by every other writer of
-- the key's gate state, in its transaction, so that the owner knows its
-- memory must be read again. The owner's transactions hold the row FOR
-- SHARE: another writer's bump waits for them, and they wait for it. No row,
-- or an empty holder (a lease that ended: rows are never deleted, so that
-- tokens only grow): no owner, and the other writers' bump changes nothing.
CREATE TABLE owners (
    gate_key   text PRIMARY KEY,
    token      bigint NOT NULL,
    holder     text NOT NULL,
    foreign_n  bigint NOT NULL DEFAULT 0,
    taken_at   timestamptz NOT NULL DEFAULT now()
);
