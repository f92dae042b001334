-- Waits to acquire a lock, whichever instance queued them, in one order (`queued`, from a
-- sequence drawn under the writers' lock; a sequence never gives a number twice, even when
-- the batch that drew it rolls back): an instance hands a freed key to its own first
-- waiter only when no other instance's waiter for the key queued before it.
-- `connection` says whose wait it is (see instances.connection_base); owner, mode and
-- slots are what ListResourceLocks shows of it on any instance.
CREATE TABLE lock_waits (
    queued       BIGINT PRIMARY KEY,
    resource_key TEXT   NOT NULL,
    connection   BIGINT NOT NULL,
    owner        TEXT   NOT NULL,
    mode         TEXT   NOT NULL,
    slots        BIGINT
);
CREATE INDEX lock_waits_connection ON lock_waits (connection);
CREATE SEQUENCE lock_wait_seq;
