-- Shared locks and slots (contract v1.1, "Locks: shared mode and slots"): a key may have
-- several holders, each with its own lease, so a lease is keyed by its id now, and says
-- its mode (`exclusive` or `shared`) and, for a counting key, its number of slots.
CREATE TABLE locks_by_lease (
    lease_id          TEXT    PRIMARY KEY,
    resource_key      TEXT    NOT NULL,
    kind              TEXT    NOT NULL,
    path              TEXT,
    owner             TEXT    NOT NULL,
    provider          TEXT,
    fencing_token     INTEGER NOT NULL,
    acquired_at       INTEGER NOT NULL,
    expires_at        INTEGER NOT NULL,
    metadata          TEXT,
    holder_connection INTEGER,
    token_id          TEXT,
    session_id        TEXT,
    mode              TEXT    NOT NULL DEFAULT 'exclusive',
    slots             INTEGER
) WITHOUT ROWID;
INSERT INTO locks_by_lease (lease_id, resource_key, kind, path, owner, provider, fencing_token,
                            acquired_at, expires_at, metadata, holder_connection, token_id,
                            session_id)
    SELECT lease_id, resource_key, kind, path, owner, provider, fencing_token, acquired_at,
           expires_at, metadata, holder_connection, token_id, session_id
    FROM locks;
DROP TABLE locks;
ALTER TABLE locks_by_lease RENAME TO locks;
CREATE INDEX locks_by_key ON locks (resource_key);
CREATE INDEX locks_by_path ON locks (path, mode) WHERE path IS NOT NULL;
CREATE INDEX locks_by_owner ON locks (owner);
CREATE INDEX locks_by_session ON locks (session_id) WHERE session_id IS NOT NULL;
