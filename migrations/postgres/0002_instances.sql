-- The daemons sharing this database, each heartbeating by the database server's clock.
-- Connection ids of an instance lie in [connection_base, connection_base + 2^32): when an
-- instance stops heartbeating, another ends the leases and sessions tied to them.
CREATE TABLE instances (
    instance_id     TEXT PRIMARY KEY,
    connection_base BIGINT NOT NULL,
    started_at      BIGINT NOT NULL,
    heartbeat_at    BIGINT NOT NULL
);
