-- Waits to acquire a lock, whichever instance queued them, in one order (`queued`, counted
-- from meta's wait_seq under the writers' lock): an instance hands a freed key to its own
-- first waiter only when no other instance's waiter for the key queued before it.
-- `connection` says whose wait it is (see instances.connection_base).
CREATE TABLE lock_waits (
    queued       BIGINT PRIMARY KEY,
    resource_key TEXT   NOT NULL,
    connection   BIGINT NOT NULL
);
CREATE INDEX lock_waits_connection ON lock_waits (connection);
INSERT INTO meta (name, value) VALUES ('wait_seq', 0) ON CONFLICT (name) DO NOTHING;
