-- Leases keyed by (resource_key, lease_id). Keyed by lease id with an index by key, every
-- acquire and release changed two B-trees, two pages in the write-ahead log. The writer
-- knows each lease's key (its copy of the live leases), so it deletes and extends leases
-- by both; listing by key prefix reads the table in key order.
CREATE TABLE locks_new (
    resource_key      TEXT    NOT NULL,
    lease_id          TEXT    NOT NULL,
    kind              TEXT    NOT NULL,
    path              TEXT,
    owner             TEXT    NOT NULL,
    provider          TEXT,
    fencing_token     INTEGER NOT NULL,
    acquired_at       INTEGER NOT NULL,  -- epoch milliseconds
    expires_at        INTEGER NOT NULL,  -- epoch milliseconds, for display and restarts
    metadata          TEXT,              -- JSON text
    holder_connection INTEGER,
    token_id          TEXT,
    session_id        TEXT,
    mode              TEXT    NOT NULL DEFAULT 'exclusive',
    slots             INTEGER,
    PRIMARY KEY (resource_key, lease_id)
) WITHOUT ROWID;
INSERT INTO locks_new (resource_key, lease_id, kind, path, owner, provider, fencing_token,
                       acquired_at, expires_at, metadata, holder_connection, token_id,
                       session_id, mode, slots)
    SELECT resource_key, lease_id, kind, path, owner, provider, fencing_token, acquired_at,
           expires_at, metadata, holder_connection, token_id, session_id, mode, slots
    FROM locks;
DROP TABLE locks;
ALTER TABLE locks_new RENAME TO locks;
CREATE INDEX locks_by_session ON locks (session_id) WHERE session_id IS NOT NULL;
